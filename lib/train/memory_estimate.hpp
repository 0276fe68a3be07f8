#pragma once
// Per-rank memory estimate for `--dry-run`, and the figure the trainer compares its measured
// peak with. The model keeps fp32 master weights and fp32 gradients (main_grad) on both devices,
// and fp32 activations except under mixed_precision: bf16_mixed on the GPU, where the layer
// inputs, the MoE expert outputs (y_perm), the experts' rows (x_perm, the EP rows) and SwiGLU
// output are bf16 (bf16 activations, docs/precision.md; everything else stays fp32). What
// bf16_mixed adds is the bf16 operands of each matrix product, converted per call into the scratch
// arena: the largest single product's copies are counted, 2 bytes a value on the GPU (real bf16)
// and 4 on the CPU (which rounds fp32 copies).
//
// Persistent state: weights, gradients, AdamW exp_avg and exp_avg_sq, 4 bytes per parameter
// each (a bf16 moment of the precision-aware optimizer: 2), of the parameters a rank holds: every
// dense one, and under EP only its E/ep experts of every MoE layer (the router stays whole). With
// the distributed optimizer the moments cover only this rank's pieces: ceil(dense / pool) +
// ceil(held experts / (pool / ep)) elements (an EP index's experts are split over its pool / ep
// expert-DP ranks).
//
// Per-bin memory at T = max_seqlen_per_dp_cp_rank local tokens (a zigzag shard never holds
// more rows than that), following what lib/model saves for backward:
//   layer inputs      (layers + 1) x T x h, plus the final norm, its gradient and the residual
//                     gradient (3 x T x h)
//   per-layer saved   attention (normed input, q/k raw and normed, v, output, lse, norm
//                     statistics, residual mid, normed mid) and MoE (router probs, top-k ids and
//                     weights, permute plan, x_perm and y_perm = k copies of the hidden state,
//                     expert gate_up and hidden rows, the EP-received rows) or dense MLP;
//                     all layers, or one layer (plus its discarded output) under recompute full;
//                     with the block method the layers not recomputed keep theirs; selective
//                     recomputation drops the experts' SwiGLU outputs (moe_act: k x I per token,
//                     + the shared expert's), the two residual norms' outputs (layernorm:
//                     2 x h per token) of every layer, the dense MLPs' gate_up and SwiGLU
//                     output (mlp: 3 x I per token) and the shared expert's (shared_experts)
//   backward scratch  one layer's temporaries (dq/dk/dv, d attention, MoE dy/dx_perm, d router),
//                     plus the selectively recomputed tensors of that layer
//   cross-entropy     one token_chunk x vocab_chunk logits tile and its row buffers
//   CP all-gather     K and V of the largest group (c x T rows), their rank-order staging copy
//                     and dK/dV: 5 x c x T x Hkv x d. c is the largest group whose tokens a step
//                     can gather (largest_cp_group_for below), not the pool
//   CP ring           (cp_comm_type p2p, instead) K/V blocks in flight and dK/dV accumulators:
//                     10 x T x Hkv x d whatever c (docs/dist.md)
//   CP all-to-all     (a2a, a2a+p2p, instead) the head-sharded Q, K, V, out and lse kept per
//                     layer (the local sizes, K/V x ρ replicas), one layer's staging and
//                     gradients, and a2a+p2p's ring blocks (10 x ρ x T x Hkv x d)
//   EP dispatch       arrived + expert outputs, T x k rows each (balanced routing; skewed
//                     routing can exceed this)
//   bf16 operand copies  (bf16_mixed) the largest product's operands, 2 bytes each on the GPU
//   DeltaNet backward (GPU)  (hybrid on cuda) the gated delta rule's backward scratch
//                     (ops/gated_delta_rule_scratch.hpp)
// Hybrid (Qwen3.5) layouts are estimated from their own layer plan: Gated DeltaNet layers keep
// their conv outputs, normalisation statistics and chunk states, gated attention its gate.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config_container.hpp"
#include "config/recompute_modules.hpp"

namespace dyncp::train {

struct MemoryEstimateInput {
  config::ModelArchitecture architecture;
  std::int64_t tokens_per_rank = 4096;  // max_seqlen_per_dp_cp_rank
  bool recompute_full = false;
  std::int64_t recompute_first_layers = -1;  // block method: only layers [0, n); -1: all
  // recompute_granularity = selective: the tensors each layer does not keep (gone from
  // "saved activations"); each is one recomputed tensor in the layer's backward scratch instead.
  config::SelectiveRecompute selective;
  std::int64_t largest_cp_group = 1;  // largest runtime CP group a bin may use
  std::int64_t expert_model_parallel_size = 1;
  std::int64_t pool_size = 1;          // dp x cp: the dense state's shards
  bool distributed_optimizer = false;  // ddp.use_distributed_optimizer
  double exp_avg_bytes = 4;            // per element: 4 fp32, 2 bf16 (precision-aware optimizer)
  double exp_avg_sq_bytes = 4;
  config::CpCommType cp_comm_type = config::CpCommType::all_gather;
  std::int64_t hierarchical_inner_size = 0;      // a2a+p2p
  std::int64_t cross_entropy_token_chunk = 256;  // model::ModelOptions defaults
  std::int64_t cross_entropy_vocab_chunk = 32768;
  bool bf16_products = false;  // mixed_precision: bf16_mixed
  bool on_gpu = false;         // dist.device: cuda (bf16 copies are 2 bytes, not 4)
  // bf16 activation storage (model::ModelOptions::bf16_activations: bf16_mixed on cuda): bf16
  // layer inputs, y_perm, expert rows and SwiGLU output, and under EP an unkept x_perm.
  bool bf16_activations = false;
  std::string largest_cp_group_why;  // how largest_cp_group was derived, for the table
  // Tensor parallelism: heads, FFN columns, vocabulary and their weights over tp (experts over
  // expert_tensor_parallel_size); the residual stream over tp only under sequence parallelism.
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t expert_tensor_parallel_size = 1;
  bool sequence_parallel = false;
  // Pipeline parallelism: the estimate of one stage (stage_layers empty: the whole model).
  // The stage holds its layers' parameters, the embedding on the first stage, the final norm
  // and LM head on the last; its saved activations are those of its layers, times the
  // microbatches in flight its schedule keeps (pipeline_in_flight); the loss chunk is only on
  // the last stage, and every stage has the P2P buffers of one bin's activation and gradient.
  // With both, the stage's numbers are divided by tp as above.
  bool pipeline = false;
  // The stage's layers as runs {first layer, count} (one per virtual chunk); empty: every layer.
  std::vector<std::pair<std::int64_t, std::int64_t>> stage_layers;
  bool stage_holds_embedding = true;
  bool stage_holds_loss = true;
  double pipeline_in_flight = 1;
};

struct MemoryLine {
  std::string name;
  double bytes = 0;
  std::string detail;
};

struct MemoryEstimate {
  std::vector<MemoryLine> lines;
  std::int64_t num_parameters = 0;
  double parameter_state_bytes = 0;  // weights + gradients + optimizer moments
  double per_bin_bytes = 0;          // activations and every scratch buffer
  double total_bytes() const { return parameter_state_bytes + per_bin_bytes; }
};

// Values a Qwen3-MoE architecture stores on one rank, as lib/model lays them out: tied
// embeddings once, every tensor rounded up to 16 values, E / expert_model_parallel_size
// experts per MoE layer.
std::int64_t count_parameters(const config::ModelArchitecture& architecture,
                              std::int64_t expert_model_parallel_size = 1);
// The part of count_parameters in routed experts' tensors (gate_up and down of MoE layers).
std::int64_t count_expert_parameters(const config::ModelArchitecture& architecture,
                                     std::int64_t expert_model_parallel_size = 1);
// The values tensor parallelism replicates on every TP rank: the norms' weights (residual,
// q/k, final, the gated norm's), the routers and the shared-expert gates. The rest of the
// dense parameters is split over tp.
std::int64_t count_tensor_parallel_replicated_parameters(
    const config::ModelArchitecture& architecture);

MemoryEstimate estimate_memory(const MemoryEstimateInput& input);

// The largest CP group whose K/V a step can all-gather, from the recipe's scheduler rules:
//   static CP                    context_parallel_size;
//   default_dynamic_cp, a pool   needed(seq_length) = the least power of two >= min size with
//   that is a power of two       the longest sample's padded length <= c x cap. A sample opens a
//                                larger group than it needs only while its own work (L^2 / c)
//                                would set the microbatch's maximum rank load, and the longest
//                                sample's group already sets that maximum, so no group opens
//                                above needed(longest); doubling idle groups spreads the same
//                                tokens over more ranks, so c x local rows does not grow;
//   cost_aware, other pools      the pool (promotion and the parent-block bins, or the
//                                whole-pool fallback of pools that are not a power of two, can
//                                fill a pool-wide group).
// `why` receives a short explanation.
std::int64_t largest_cp_group_for(const config::ConfigContainer& config,
                                  std::string* why = nullptr);

// The input a resolved recipe implies (cap, recompute, largest group, EP size, precision).
MemoryEstimateInput memory_estimate_input(const config::ConfigContainer& config);

// The input of pipeline stage `stage` (its layers, embedding / loss, and the activations of
// the microbatches 1F1B keeps in flight there: pp - stage without interleaving; with v virtual
// chunks Megatron's warm-up 2 (pp - stage - 1) + (v - 1) pp chunks plus one, each 1 / v of the
// stage's layers). At most `microbatches` whole microbatches (<= 0: not bounded).
MemoryEstimateInput memory_estimate_input_for_stage(const config::ConfigContainer& config,
                                                    std::int64_t stage,
                                                    std::int64_t microbatches = 0);

// Whether `ranks_here` ranks of this estimate fit in `available_bytes` (0: unknown), as one
// line for the dry run: "fits: ...", "does NOT fit: ..." or "fits?: not checked ...".
std::string memory_fit_line(const MemoryEstimate& estimate, std::int64_t ranks_here,
                            double available_bytes, const std::string& available_what);

// Physical memory of this machine in bytes (0 when the system does not say).
double host_memory_bytes();

// A table in MiB: one line per item and the total.
std::string format_memory_table(const MemoryEstimate& estimate);

}  // namespace dyncp::train
