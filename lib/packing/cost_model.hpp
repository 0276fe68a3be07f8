#pragma once
// Modelled step time of a schedule, for comparing schedulers and for the cost-aware one.
//
// Per sequence of L tokens (Megatron's model-FLOPs count, fwd + bwd, reference qwen-moe §6):
//   flops(L) = linear_flops_per_token * L + attention_flops_per_token_squared * L^2
// and with a sliding window of w < L positions (config.json's sliding_window), where each query
// sees at most w keys, the attention term charges L·w − w²/2 causal pairs instead of L²/2:
//   flops(L) = linear_flops_per_token * L + attention_flops_per_token_squared * (2Lw − w²)
// A bin (the sequences one group runs in one microbatch) on a group of c ranks takes, on each
// member rank:
//   t(bin, c) = sum_i flops(L_i) / (c * device_flops_per_second)
//             + [c > 1] * exchange(N = sum_i L_i, c)
//             + microbatch_overhead_seconds
// where exchange is the CP exchange's latency and bytes (cp_comm_type), per attention layer
// two phases — the forward exchange of its inputs and the backward exchange of their
// gradients — with α = collective_latency_seconds per phase (per ring step for rings),
// kv = kv_bytes_per_token_per_layer, q = query_bytes_per_token_per_layer (Q, and out: the same
// size), bandwidth(c) the NVLink rate while c fits in one node of ranks_per_node, the network
// rate beyond, and no overlap assumed:
//   all_gather  A·2·(α + (c−1)/c · N·kv / bw(c))
//   p2p         A·2·((c−1)·α + (c−1)/c · N·kv / bw(c))     (the ring moves the same bytes)
//   a2a         (A + D)·2·α + A·2·(c−1)/c · (N/c)·(2q + ρ·kv) / bw(c)
//                 + D·2·(c−1)/c · (N/c)·(ρ_D·dk + dv) / bw(c)
//   a2a+p2p     a = min(c, inner), b = c / a: the a2a terms on a ranks (bw(a)), plus the
//                 ring of b over all-to-all groups: A·2·((b−1)·α + (b−1)·(N/c)·ρ·kv / bw(c))
// A = attention layers, D = Gated DeltaNet layers (a2a exchanges their raw q/k (dk per token)
// and v/g/beta/out (dv) too), ρ = K/V head replicas of an all-to-all group
// (config/head_sharding.hpp), ρ_D the same for the DeltaNet key heads.
// DeltaNet layers under all_gather and p2p pass chunk-boundary states instead
// (parallel/cp_linear_attention_states.hpp): per layer four collectives (conv tails and the
// [F | P] transfer forward; the tails' gradients and G backward) and, per sequence, about
// 2(c−1) segments' states received per rank, σ bytes each (σ = Hv·dk·(dk + dv) + Hv·dk·dv fp32
// plus three conv tails), independent of the sequence's length:
//   state passing  D·4·α + D·S·2(c−1)·σ / bw(c)            (S sequences in the bin)
// a2a+p2p passes them on its ring of b ranks over heads split a ways: D·4·α + D·S·2(b−1)·σ/a. Not
// charged: all_gather's and p2p's backward re-exchange of K/V (as many bytes again as the forward)
// and a2a's lse (1/head_dim of out); the measured bytes in docs/benchmarks/dist.md include them.
// Step time: every rank runs its microbatches in order; a group starts when all its members
// have finished their previous microbatch; the step ends when the last rank finishes.
//
// Lower bound (any schedule meeting the contract on the same padded lengths):
//   work_i     = min over valid c of c * (compute + bandwidth part of t on c ranks)  [rank-s]
//   solo_i     = min over valid c of t({L_i}, c) - microbatch_overhead_seconds       [s]
//   M_min      = ceil(sum_i L_i / (P * cap))
//   lower_bound = max(sum_i work_i / P, max_i solo_i) + M_min * microbatch_overhead_seconds
// valid c: powers of two with needed(L_i) <= c <= P (the whole pool when none is).

#include <cstdint>
#include <span>
#include <vector>

#include "config/config_container.hpp"
#include "config/model_architecture.hpp"
#include "packing/schedule.hpp"

namespace dyncp::packing {

// The `packing` cost-model parameters; defaults describe H200 GPUs on NVLink and match the
// config section (config::PackingCostConfig).
struct CostModelParameters {
  double device_flops_per_second = 4.5e14;   // ~45% of H200 dense BF16 peak (989 TFLOP/s)
  double link_bytes_per_second = 4.0e11;     // NVLink within a node, per direction
  double network_bytes_per_second = 5.0e10;  // per GPU across nodes (400 Gb/s NIC)
  std::int64_t ranks_per_node = 8;
  double collective_latency_seconds = 15e-6;    // per CP collective (launch + sync)
  double microbatch_overhead_seconds = 5.0e-4;  // per microbatch per rank (launches, syncs)
  // The CP exchange priced (model.cp_comm_type) and a2a+p2p's inner size.
  config::CpCommType cp_comm_type = config::CpCommType::all_gather;
  std::int64_t hierarchical_inner_size = 0;
  // Pipeline parallelism (model.pipeline_model_parallel_size, .virtual_pipeline_...): each stage
  // runs 1 / pp of every microbatch's layers, a forward a third of a pass and a backward two
  // thirds, in the 1F1B (or interleaved) order of packing/pipeline_schedule.hpp, so step_time
  // includes the bubble. The point-to-point transfers between stages are not priced.
  std::int64_t pipeline_stages = 1;
  std::int64_t pipeline_virtual_chunks = 1;
};

// The parameters of a recipe's `packing` section; the keys it does not have keep the defaults.
CostModelParameters cost_model_parameters(const config::PackingCostConfig& section);
// The same, pricing the recipe's CP exchange (model.cp_comm_type and its hierarchical sizes).
CostModelParameters cost_model_parameters(const config::PackingCostConfig& section,
                                          const config::ModelConfig& model);

// Megatron's model-FLOPs count split by the kind of kernel that runs it: the one formula behind
// ModelCost::linear_flops_per_token (and so the metrics' TFLOP/s) and the modelled step
// (step_model.hpp). A matrix product of `in` -> `out` features per token row costs
// 6 in out FLOPs per row (forward, input gradient, weight gradient).
struct ProductFlops {
  double flops_per_token = 0.0;
  double weight_values = 0.0;         // in x out, summed over the products (every expert)
  double row_values_per_token = 0.0;  // (in + out) x rows per token, summed over the products
  double products = 0.0;              // matrix products over the layers (an expert's once)
};
struct ModelFlopsBreakdown {
  // Attention and Gated DeltaNet projections, dense MLPs, shared experts.
  ProductFlops dense;
  // Routed experts: k rows per token per MoE layer; weight_values count all E experts.
  ProductFlops experts;
  ProductFlops logits;  // the LM head, inside the fused cross-entropy
  // Gated DeltaNet's causal conv1d and gated delta rule (reference qwen-moe §6), per token.
  double deltanet_flops_per_token = 0.0;
  double attention_flops_per_token_squared = 0.0;
  std::int64_t attention_layers = 0;
  std::int64_t linear_attention_layers = 0;
  std::int64_t moe_layers = 0;
  double linear_flops_per_token() const {
    return dense.flops_per_token + experts.flops_per_token + logits.flops_per_token +
           deltanet_flops_per_token;
  }
};
ModelFlopsBreakdown model_flops_breakdown(config::ModelArchitecture architecture);

// The model's shape as the cost model needs it.
struct ModelCost {
  double linear_flops_per_token = 0.0;
  double attention_flops_per_token_squared = 0.0;
  double kv_bytes_per_token_per_layer = 0.0;  // K and V of one attention layer, bf16
  std::int64_t attention_layers = 0;          // layers whose K/V cross the CP group
  std::int64_t sliding_window = 0;            // keys a query sees at most (0: all before it)
  // For the all-to-all exchanges: Q (= out) of one attention layer, bf16, and the heads.
  double query_bytes_per_token_per_layer = 0.0;
  std::int64_t query_heads = 1, kv_heads = 1;
  // Gated DeltaNet layers: raw q and k (key side), v, g, beta and out (value side), bf16.
  std::int64_t linear_attention_layers = 0;
  double linear_key_bytes_per_token_per_layer = 0.0;
  double linear_value_bytes_per_token_per_layer = 0.0;
  std::int64_t linear_key_heads = 1, linear_value_heads = 1;
  // σ above: the state-passing bytes of one segment of one DeltaNet layer, fp32.
  double linear_state_bytes_per_segment_per_layer = 0.0;
};

// From an HF-style architecture (Qwen3-MoE or the Qwen3.5 hybrid).
ModelCost model_cost_from_architecture(config::ModelArchitecture architecture);

// Qwen3-30B-A3B, the benchmark model.
config::ModelArchitecture qwen3_30b_a3b_architecture();

class CostModel {
 public:
  CostModel(ModelCost model, CostModelParameters parameters)
      : model_(model), parameters_(parameters) {}

  const ModelCost& model() const { return model_; }
  const CostModelParameters& parameters() const { return parameters_; }

  double sequence_flops(std::int64_t length) const;
  // The attention part of sequence_flops (the L^2 term, capped by a sliding window).
  double attention_flops(std::int64_t length) const;
  // Per-rank compute seconds of one sequence on a group of `group_size`.
  double compute_seconds(std::int64_t length, std::int64_t group_size) const;
  // Per-rank CP communication seconds for a bin of `tokens` in `sequences` sequences on
  // `group_size` ranks (DeltaNet state passing is charged per sequence).
  double communication_seconds(std::int64_t tokens, std::int64_t group_size,
                               std::int64_t sequences = 1) const;
  // The bandwidth part only (no latency), per rank.
  double transfer_seconds(std::int64_t tokens, std::int64_t group_size,
                          std::int64_t sequences = 1) const;
  double bin_seconds(std::span<const std::int64_t> lengths, std::int64_t group_size) const;

  struct StepTime {
    double step_seconds = 0.0;
    double pipeline_bubble_fraction = 0.0;  // of the step, with pipeline_stages > 1
    double mean_rank_busy_seconds = 0.0;    // balance = mean_rank_busy / step
    double max_rank_busy_seconds = 0.0;
    double min_rank_busy_seconds = 0.0;
  };
  // `lengths` as the schedulers take them: each is padded for the group that runs it.
  StepTime step_time(const Schedule& schedule, std::span<const std::int64_t> lengths,
                     const AlignmentRule& alignment = {}) const;

 private:
  void apply_pipeline(StepTime& result, const std::vector<double>& microbatch_seconds) const;

 public:
  // Both bounds let each sequence choose its group, so it is charged the padding of that
  // group (per-group padding) or the pool's (pool rule).
  double lower_bound_seconds(std::span<const std::int64_t> lengths, std::int64_t pool_size,
                             std::int64_t max_seqlen_per_dp_cp_rank, std::int64_t min_group_size,
                             const AlignmentRule& alignment = {}) const;

  // A tighter bound: in a step of length T every sequence runs on a group where it alone
  // takes <= T, so the work term uses the cheapest such group. The least T with
  //   T >= sum_i min{work_i(c) : solo_i(c) <= T} / P   and   T >= max_i min_c solo_i(c)
  // is found by sweeping the solo times; the result is T + M_min x overhead.
  double tight_lower_bound_seconds(std::span<const std::int64_t> lengths, std::int64_t pool_size,
                                   std::int64_t max_seqlen_per_dp_cp_rank,
                                   std::int64_t min_group_size,
                                   const AlignmentRule& alignment = {}) const;

 private:
  double bandwidth(std::int64_t group_size) const;
  // The CP exchange's latency (phases x α) and bandwidth seconds of a bin, per rank.
  struct ExchangeSeconds {
    double latency = 0.0;
    double transfer = 0.0;
  };
  ExchangeSeconds exchange_seconds(std::int64_t tokens, std::int64_t group_size,
                                   std::int64_t sequences) const;

  ModelCost model_;
  CostModelParameters parameters_;
};

}  // namespace dyncp::packing
