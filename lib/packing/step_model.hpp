#pragma once
// The modelled GPU step (docs/step-model.md): where the time of one training step would go on a
// device described by a table of peaks, efficiencies and latencies (the recipe's
// packing.step_model_* keys; H200 SXM by default), for the kernels as they are designed.
//
// Per op class, for the modelled rank's microbatches and the step's once-per-step work:
//   FLOPs      the model FLOPs the class runs: cost_model.hpp's ModelFlopsBreakdown (the one
//              formula behind the metrics' TFLOP/s), times 4/3 for a layer class under full
//              recomputation (the forward runs twice)
//   bytes      device-memory traffic as the kernels are designed (compulsory operand and
//              result traffic; for communication, the bytes a rank sends)
//   serial     the kernel's sequential steps x a per-step latency (the token-by-token gated
//              delta rule's tokens, the chunked one's 64-token chunks) plus its launches x the
//              launch latency (collectives: x the collective latency)
//   time       max(FLOPs / (peak x efficiency), bytes / (bandwidth x memory efficiency))
//              + the serial term; communication: bytes / link rate + collectives x latency
// The step is the sum of its rows less what is hidden: a collective overlapped with compute
// hides at most the compute it runs beside, as built (docs/step-model.md):
//   ddp.overlap_grad_reduce    the gradient buckets (all-reduce, or the distributed
//                              optimizer's reduce to owners) beside the last microbatch's
//                              backward, less the embedding's bucket, final only at its end;
//   ddp.overlap_param_gather   the parameter gather beside the first microbatch's forward, less
//                              the embedding's bucket, which the forward needs first;
//   moe_shared_expert_overlap  each MoE layer's dispatch all-to-all beside its shared expert's
//                              forward (the hybrid under EP);
//   CP all_gather              each attention layer's backward K / V gather beside its MLP
//                              backward (it starts before it, always on the GPU path).
// Every other collective is waited for, hidden 0. MFU = the
// step's model FLOPs (every rank's, Megatron's formula on padded lengths, no recomputation) / (step
// time x ranks x bf16 peak).
//
// Pure arithmetic: no devices, no communicators.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "config/model_architecture.hpp"
#include "packing/cost_model.hpp"

namespace dyncp::packing {

// The table: the recipe's packing.step_model_* keys plus the cost model's links and latency.
struct StepModelParameters {
  config::DeltaNetKernel deltanet_kernel = config::DeltaNetKernel::chunked;
  double bf16_flops_per_second = 7.9e14;  // measured dense bf16 matrix rate, random data
  double fp32_flops_per_second = 6.7e13;
  double memory_bytes_per_second = 4.8e12;
  double launch_latency_seconds = 5e-6;
  double dense_gemm_efficiency = 0.7;
  double expert_gemm_efficiency = 0.5;
  double attention_efficiency = 0.35;
  double deltanet_efficiency = 0.3;
  double cross_entropy_efficiency = 0.6;
  double memory_efficiency = 0.8;
  double deltanet_token_step_seconds = 5e-7;
  double deltanet_chunk_step_seconds = 2e-6;
  double link_bytes_per_second = 4e11;     // within a node, per direction
  double network_bytes_per_second = 5e10;  // across nodes
  std::int64_t ranks_per_node = 8;
  double collective_latency_seconds = 15e-6;
};

StepModelParameters step_model_parameters(const config::PackingCostConfig& section);

// The datasheet's dense bf16 peak of an H200 SXM, for the second MFU figure.
inline constexpr double kH200DatasheetBf16FlopsPerSecond = 989e12;
// Chunk length of the chunked gated delta rule.
inline constexpr std::int64_t kDeltaNetChunkTokens = 64;
// The token-by-token backward kernel's grid cap (kernels/gated_delta_rule.cu) and its
// sequential steps per token: replay, reverse sweep and the column sums, each about one
// forward token step long.
inline constexpr std::int64_t kTokenByTokenBackwardBlocks = 64;
inline constexpr double kTokenByTokenBackwardStepsPerToken = 4.0;

// One microbatch of the modelled rank: its group and the whole (padded) lengths of the
// sequences the group runs; the rank holds 1 / group_size of their tokens.
struct ModelledBin {
  std::int64_t group_size = 1;
  std::vector<std::int64_t> lengths;
};

struct StepModelInput {
  config::ModelArchitecture architecture;
  bool bf16 = true;  // mixed_precision bf16_mixed: matrix products on bf16 copies
  bool recompute_full = false;
  config::CpCommType cp_comm_type = config::CpCommType::all_gather;
  std::int64_t hierarchical_inner_size = 0;
  std::int64_t pool_size = 1;  // ranks that replicate the dense weights (dp x cp)
  std::int64_t expert_model_parallel_size = 1;
  // Tensor parallelism: each pool rank is a TP group of tensor_model_parallel_size devices,
  // each computing with `rank_architecture` (its share of the heads, FFN columns and
  // vocabulary; unset: `architecture`) and routing 1 / tp of the tokens through the experts;
  // their sums and gathers are the TP collectives' row. `architecture` stays the whole model's.
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t expert_tensor_parallel_size = 1;
  bool sequence_parallel = false;
  std::optional<config::ModelArchitecture> rank_architecture;
  // Values this rank stores (memory_estimate's count_parameters: dense + its E / ep experts).
  std::int64_t dense_parameters = 0;
  std::int64_t expert_parameters = 0;
  bool distributed_optimizer = false;
  double moment_bytes = 8.0;               // exp_avg + exp_avg_sq bytes per value
  bool overlap_grad_reduce = false;        // ddp.overlap_grad_reduce
  bool overlap_param_gather = false;       // ddp.overlap_param_gather (distributed optimizer)
  bool moe_shared_expert_overlap = false;  // model.moe_shared_expert_overlap
  std::vector<ModelledBin> bins;
  // The whole step, every rank: real tokens and Megatron's model FLOPs on padded lengths.
  std::int64_t step_real_tokens = 0;
  double step_model_flops = 0.0;
};

enum class StepOpClass {
  dense_gemm,
  expert_gemm,
  attention,
  deltanet,
  cross_entropy,
  elementwise,
  optimizer,
  cp_exchange,
  ep_all_to_all,
  tensor_parallel,
  gradient_reduce,
  optimizer_gather,
};
const char* step_op_class_name(StepOpClass op);
bool is_communication(StepOpClass op);

struct StepOpRow {
  StepOpClass op = StepOpClass::dense_gemm;
  double flops = 0.0;
  double bytes = 0.0;
  double serial_steps = 0.0;  // sequential steps of the kernel as designed
  double step_latency_seconds = 0.0;
  double launches = 0.0;  // kernel launches (communication: collectives)
  double compute_seconds = 0.0;
  double memory_seconds = 0.0;  // communication: bytes / link rate
  double latency_seconds = 0.0;
  // Communication: the part of seconds() that runs beside compute (overlap keys), so the step
  // does not wait for it; at most the compute it can overlap with.
  double hidden_seconds = 0.0;
  // What this row costs the step on its own: seconds() - hidden_seconds.
  double exposed_seconds() const { return seconds() - hidden_seconds; }
  double seconds() const;
  // "FLOPs", "bytes", "serial" or "link": which term is the largest.
  const char* bound() const;
};

struct StepModel {
  config::DeltaNetKernel deltanet_kernel = config::DeltaNetKernel::chunked;
  std::vector<StepOpRow> rows;  // one per class, in StepOpClass order (empty classes kept)
  // The compute the overlapped gradient reduction can run beside: the last microbatch's
  // backward (2/3 of its compute rows' time), and how much of the reduction must stay exposed
  // (the embedding's bucket, which is final only when the backward ends).
  double gradient_overlap_window_seconds = 0.0;
  double gradient_last_bucket_seconds = 0.0;
  // The same for the overlapped parameter gather: the first microbatch's forward (1/3 of its
  // compute), and the embedding's bucket, which that forward waits for before anything.
  double gather_overlap_window_seconds = 0.0;
  double gather_first_bucket_seconds = 0.0;
  std::int64_t microbatches = 0;
  std::int64_t ranks = 1;
  double step_seconds = 0.0;
  double tokens_per_second = 0.0;  // the step's real tokens over all ranks / step time
  double model_flops_per_second_per_rank = 0.0;
  double mfu = 0.0;               // of StepModelParameters::bf16_flops_per_second
  double mfu_of_datasheet = 0.0;  // of kH200DatasheetBf16FlopsPerSecond
  const StepOpRow& row(StepOpClass op) const;
};

// The modelled step of one rank running `input.bins`, then the step's gradient reduction and
// optimizer. Ranks of a step run different bins: model each and keep the slowest.
StepModel model_step(const StepModelInput& input, const StepModelParameters& parameters);

// The table as --dry-run prints it: one row per class with FLOPs, bytes, serial depth,
// roofline and latency terms, time and share; then, per collective, its modelled time and how
// much is hidden behind compute; then the totals.
std::string format_step_model(const StepModel& model, const StepModelParameters& parameters);

}  // namespace dyncp::packing
