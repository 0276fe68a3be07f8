#pragma once
// What the parts of the layout equivalence tool share (layout_equivalence.cpp runs the checks):
// its options, the comparisons against the one-rank reference by HF tensor name, and the checks
// of the distributed optimizer's state and of the overlap keys.

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "core/tensor.hpp"
#include "data/sample.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "train/optimizer.hpp"
#include "train/step_engine.hpp"

namespace dyncp::equivalence {

// Records one check: passed, or failed with `what`.
using Check = std::function<void(bool ok, const std::string& what)>;

struct Options {
  int cp = 1;
  // --tp N: tensor parallelism (world = tp x cp x dp); --sp 1 sequence parallelism; --etp N the
  // experts' tensor parallelism (1 or tp; unset: tp, Megatron's default).
  int tp = 1;
  bool sequence_parallel = false;
  int etp = 0;
  // --heads Q,KV: attention heads (and for the hybrid its DeltaNet value, key heads); 0: the
  // tiny models' own 4, 2.
  int query_heads = 0, kv_heads = 0;
  // --mix 1248: a batch whose lengths need dynamic groups of 1, 2, 4 and 8 (8 ranks).
  bool mix_group_sizes = false;
  int hierarchical_inner = 0;  // --hierarchical N: a2a+p2p's inner size
  int ep = 1;
  bool dynamic = false;
  int min_cp = 1;
  bool aux = false;
  bool recompute = false;
  // --selective 1: the layout under test (not the reference) recomputes moe_act and layernorm
  // (selective recomputation): the CP / EP seams see the experts' and norms' recomputation.
  bool selective = false;
  // --moe-kernels 0: the layout under test sets model.moe_grouped_gemm and moe_permute_fusion
  // false (host expert offsets, per-expert products, the unfused dispatch).
  bool moe_kernels = true;
  // --force-balance 1: uniform routing (model.moe_router_force_load_balancing) on the reference
  // and the layout: the experts come from the positions, which every layout shards differently.
  bool force_balance = false;
  int optimizer_steps = 3;
  // --lr: the AdamW steps' learning rate. Long runs (8 steps) use a smaller one: with 1e-2 a
  // tiny model's near-tied expert choices start to flip by round-off after a few steps.
  double lr = 1e-2;
  // --overlap-steps N: N steps (forward/backward and AdamW) with the overlap keys off and on,
  // in buckets of --bucket-size elements: losses, gradients and parameters bitwise equal.
  // --overlap-keys: which keys the second run turns on, comma-separated from grad_reduce
  // (ddp.overlap_grad_reduce), param_gather (ddp.overlap_param_gather, distributed optimizer)
  // and shared_expert (model.moe_shared_expert_overlap, the hybrid); default: every one the
  // layout takes.
  // --overlap-expect-mismatch 1 (a build whose overlap lost an event): they differ.
  int overlap_steps = 0;
  std::int64_t bucket_size = 4096;
  std::string overlap_keys;
  bool overlap_expect_mismatch = false;
  bool distributed_optimizer = false;
  bool hybrid = false;  // --model qwen3_5_moe: the Gated DeltaNet hybrid
  // --alignment per_group (default) | pool: how sequences are padded for their CP group.
  config::PackingAlignment alignment = config::PackingAlignment::per_group;
  bool fold_alignment_padding = false;  // --fold 1
  config::CpCommType cp_comm_type = config::CpCommType::all_gather;
  config::PackingScheduler scheduler = config::PackingScheduler::dp_balanced;
  core::Device device = core::Device::cpu;  // --device cuda: the layout under test on the GPU path
  // --window W: the model's sliding-window attention (config.json's sliding_window), on the
  // reference and the layout; the step checks that it changes the loss.
  std::int64_t sliding_window = 0;
  std::int64_t rope_dynamic_context = 0;  // --rope-dynamic C: dynamic RoPE past C positions
  int pp = 1;                             // --pp: pipeline stages
  int vpp = 1;                            // --vpp: virtual chunks per stage (interleaved 1F1B)
  std::int64_t layers = 0;                // --layers N: decoder layers (0: the tiny model's 2)
  double step_tolerance = 0;              // --step-tolerance T: loss and gradient every step
  bool tie = false;  // --tie 1: tied embeddings (the LM head is the embedding table)
};

Options parse_options(int argc, char** argv);

std::vector<float> host_floats(const core::Tensor& tensor);

template <typename T>
inline double norm(const T* x, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return std::sqrt(sum);
}

template <typename A, typename B>
inline double difference_norm(const A* a, const B* b, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  return std::sqrt(sum);
}

// `reference_flat` (laid out like the one-rank reference's values) laid out like `ours`, which
// may hold an expert slice or tensor-parallel pieces: each of our HF tensors is cut from the
// whole reference tensor of the same name (in HF order).
template <typename T = float>
std::vector<T> laid_out_like(const model::Qwen3MoeParameters& ours,
                             const model::Qwen3MoeParameters& reference,
                             const core::Tensor& reference_flat);

// The HF names of the tensors stored in [offset, offset + count) of the flat buffers.
std::string tensors_in(const model::Qwen3MoeParameters& parameters, std::int64_t offset,
                       std::int64_t count);

// Memory really is divided: this stage's dense parameters whole, its experts 1/ep, over the EP
// group every expert exactly once, over the stages every tensor of the whole model exactly once;
// and the seeded slice is the reference's values there.
void check_memory_division(const Options& options, const config::ModelArchitecture& architecture,
                           const model::ModelPart& part, const model::Qwen3MoeParameters& ours,
                           const model::Qwen3MoeParameters& reference_parameters,
                           dist::ParallelState& parallel_state, int etp, const Check& check);

// The exchange asked for is the one that ran: only the ring moves point-to-point bytes, and it
// does whenever a microbatch ran on a group of two or more (a2a+p2p: on a group larger than the
// inner size); only the a2a exchanges move all-to-all bytes over the CP groups (EP's all-to-all
// runs on the EP group). With pipeline stages, activations crossed them.
void check_exchange_ran(const Options& options, train::StepEngine& engine,
                        dist::ParallelState& parallel_state, const train::StepOutcome& outcome,
                        const Check& check);

// Distributed optimizer: each rank holds state for its own piece of each kind, at most
// ceil(elements / shards), and the pieces of the pool cover every element exactly once.
void check_state_division(train::StepEngine& engine, dist::ParallelState& parallel_state,
                          const train::AdamWOptimizer& optimizer, const Check& check);

// The overlap keys change no bit: two models from the same seed, one engine with the keys off
// and one with them on (overlapped bucket reduction, overlapped parameter gather, the shared
// expert beside the EP exchange), the same batch and AdamW for several steps: losses, gradient
// norms, gradients and, after every optimizer step, parameters bitwise equal; and the overlap
// ran (buckets started during the backward, buckets waited for layer by layer in the forward,
// exchanges with the shared expert beside them).
void compare_overlap(const Options& options, const config::ModelArchitecture& architecture,
                     const model::ModelOptions& model_options, dist::ParallelState& parallel_state,
                     const data::SampleSource& source, const train::StepEngineOptions& base_options,
                     const std::vector<std::int64_t>& ids, const Check& check);

}  // namespace dyncp::equivalence
