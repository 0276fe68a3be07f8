#pragma once
// One step's forward and backward over a global batch, on any layout (1 rank, DP, static CP,
// dynamic CP, EP), ending with gradients summed over the ranks that share them. This is the
// part of the trainer the layout-equivalence tests drive directly.
//
//   positions 0..GBS-1 of the global batch -> real lengths -> Schedule (every rank computes
//   the same one; each sequence padded for the group it lands on) -> dynamic CP groups
//   ensured -> for each microbatch: this rank's samples, padded for its group ->
//   zigzag bin -> model forward+backward on the runtime group -> gradient sync (all-reduce,
//   or with the distributed optimizer a reduce-scatter that leaves each rank its pieces).
//
// Normalisation (docs/architecture.md §4.6): the loss is the sum of token losses over the
// global batch divided by its loss tokens N, known before the step from the data, so each
// microbatch's gradient is of (CE_sum / N + aux): the model scales its CE gradient by 1 / N and
// the aux gradient by 1; no group size enters.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "config/config_container.hpp"
#include "config/pipeline_split.hpp"
#include "data/sample.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "packing/cost_model.hpp"
#include "packing/schedule.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/cp_exchange.hpp"
#include "parallel/gradient_sync.hpp"
#include "parallel/overlapped_gradient_reduce.hpp"
#include "parallel/parameter_partition.hpp"
#include "parallel/rank_seams.hpp"
#include "parallel/sharded_state_sync.hpp"
#include "train/bin_builder.hpp"
#include "train/pipeline_executor.hpp"
#include "train/step_metrics.hpp"

namespace dyncp::train {

struct StepEngineOptions {
  config::PackingScheduler scheduler = config::PackingScheduler::default_dynamic_cp;
  std::int64_t max_seqlen_per_dp_cp_rank = 4096;
  // How each sequence is padded for the group it runs on (packing/alignment.hpp); the default
  // pads nothing.
  packing::AlignmentRule alignment;
  bool fold_alignment_padding = false;
  std::int32_t pad_token_id = 0;
  config::CpCommType cp_comm_type =
      config::CpCommType::all_gather;       // how a CP group exchanges attention inputs
  int hierarchical_inner_size = 0;          // a2a+p2p: hierarchical_context_parallel_sizes[0]
  packing::CostModelParameters cost_model;  // for the cost_aware scheduler and FLOP counts
  // Reduce-scatter gradients for a sharded optimizer (train::AdamWOptimizer built on
  // sharded_state_sync()) instead of all-reducing them.
  bool distributed_optimizer = false;
  // ddp.overlap_grad_reduce: gradients summed in buckets of bucket_elements while the last
  // microbatch's backward runs (with pipeline stages: each chunk's last backward;
  // parallel/overlapped_gradient_reduce.hpp): all-reduced, or with the distributed optimizer
  // reduced to the ranks owning their pieces.
  bool overlap_grad_reduce = false;
  // ddp.overlap_param_gather (distributed optimizer only): the optimizer's parameter
  // all-gather in the same buckets, beside the next forward
  // (parallel/overlapped_parameter_gather.hpp).
  bool overlap_param_gather = false;
  std::int64_t bucket_elements = 40'000'000;
  // Pipeline stages: with pipeline_size > 1 the model holds this rank's stage
  // (parallel::stage_model_part) and the microbatches run the pipeline schedule
  // (train/pipeline_executor.hpp); losses and the gradient norm are then summed over stages.
  config::PipelineSplit pipeline;
};

// What one step's forward/backward produced, reduced over the pool.
struct StepOutcome {
  double loss_sum = 0;             // Σ token losses over the global batch
  std::int64_t loss_tokens = 0;    // N
  double aux_loss = 0;             // Σ over MoE layers (already / N_seq)
  double loss = 0;                 // loss_sum / N
  double grad_sum_of_squares = 0;  // of the normalised gradient (1 / N applied)
  std::int64_t microbatches = 0;
  std::map<int, int> group_sizes;  // runtime group size -> groups over the step
  std::int64_t comm_bytes = 0;     // bytes sent by all ranks during the step (Comm counters)
  std::int64_t real_tokens = 0;    // Σ original lengths
  std::int64_t padded_tokens = 0;  // Σ lengths padded for the groups the schedule chose
  double model_flops = 0;          // Megatron's formula on those padded lengths, whole batch
  // Bytes this rank copied between host and device in the step (0 on the CPU): the bins up;
  // losses, norms and id checks down, and the expert offsets under EP or per-expert products.
  std::int64_t host_device_bytes = 0;
  StepTimeBreakdown time;
  // Pipeline stages: the measured bubble (1 - time in passes / (stages x step time)), and this
  // rank's time in passes and from its first round to its last.
  double pipeline_bubble_fraction = 0;
  double pipeline_busy_ms = 0;
  double pipeline_wall_ms = 0;
};

class StepEngine {
 public:
  StepEngine(model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
             const data::SampleSource& source, const StepEngineOptions& options);

  // Zeroes the gradients, runs every microbatch of the batch (dataset sample ids, in batch
  // order) and leaves normalised, synchronised gradients in the model's gradient buffer: at
  // every owned range, or with the distributed optimizer only at this rank's pieces.
  StepOutcome forward_backward(std::span<const std::int64_t> sample_ids);
  // The same schedule and bins, forward only: the loss of a held-out batch. Gradients are
  // left untouched.
  StepOutcome evaluate(std::span<const std::int64_t> sample_ids);

  const parallel::ParameterPartition& partition() const { return partition_; }
  // The distributed optimizer's shards and collectives; nullptr unless the options ask for it.
  parallel::ShardedStateSync* sharded_state_sync() { return sharded_state_sync_.get(); }
  // The overlapped bucket reduction; nullptr unless overlap_grad_reduce is on.
  const parallel::OverlappedGradientReduce* overlapped_reduce() const {
    return overlapped_reduce_.get();
  }
  // The overlapped parameter gather; nullptr unless overlap_param_gather is on.
  const parallel::OverlappedParameterGather* overlapped_parameter_gather() const {
    return sharded_state_sync_ ? sharded_state_sync_->overlapped_parameter_gather() : nullptr;
  }
  // Waits for a parameter gather the optimizer started (overlap_param_gather); a no-op
  // otherwise. Every reader of the parameters between steps calls it (evaluation, checkpoints,
  // the export: train::HostParameters, train::HeldOutEvaluation), the next step's forward waits
  // bucket by bucket instead.
  void complete_parameter_gather();
  // Everything this engine's communicators moved: the parallel state's, the CP exchange's
  // subgroups' and the overlapped reductions' and gather's own.
  dist::CommCounters communication_counters() const;
  const parallel::SeamCounters& seam_counters() const { return counters_; }
  const parallel::CpExchangeSeams& cp_exchange() const { return seams_.exchange; }
  const packing::Schedule& last_schedule() const { return schedule_; }

 private:
  StepOutcome run(std::span<const std::int64_t> sample_ids, bool compute_gradients);
  packing::Schedule make_schedule(std::span<const std::int64_t> real_lengths) const;
  dist::Comm* runtime_group(std::int64_t size);

  model::Qwen3MoeModel& model_;
  dist::ParallelState& parallel_state_;
  const data::SampleSource& source_;
  StepEngineOptions options_;
  packing::CostModel cost_model_;
  parallel::SeamCounters counters_;
  parallel::RankSeams seams_;  // the model's seams, the CP exchange on the runtime group
  parallel::ParameterPartition partition_;
  std::optional<parallel::GradientSync> gradient_sync_;             // replicated optimizer state
  std::unique_ptr<parallel::ShardedStateSync> sharded_state_sync_;  // distributed optimizer
  std::unique_ptr<parallel::OverlappedGradientReduce> overlapped_reduce_;  // overlap_grad_reduce
  BinBuilder bin_builder_;
  // On the GPU: the bin's per-token tensors, uploaded from the host bin each microbatch.
  const model::PackedBin& upload_bin(const model::PackedBin& host_bin);
  // After the last microbatch: the sharded, overlapped or plain gradient reduction.
  void synchronise_gradients(bool overlapped);
  // The step's microbatch options, with the parameter gather's waits while a gather is pending
  // (the bucket starts of the last backward are added by run_microbatches / run_pipeline).
  model::BinOptions bin_options_for(bool compute_gradients, double inverse_tokens,
                                    std::int64_t batch_size);
  // The step's microbatches one after another (one stage), or through this rank's pipeline
  // stage: this rank's CE sum and aux loss (once per group) added to local_sums.
  void run_microbatches(std::int64_t microbatches, const model::BinOptions& options, bool overlap,
                        double local_sums[2], StepOutcome& outcome);
  void run_pipeline(std::int64_t microbatches, const model::BinOptions& options, bool overlap,
                    double local_sums[2], StepOutcome& outcome);
  std::unique_ptr<PipelineExecutor> pipeline_;  // pipeline stages (pipeline.pipeline_size > 1)
  // A tied head under pipeline stages, on the first and last stage: the embedding group.
  dist::Comm* tied_embedding_group_ = nullptr;
  std::vector<PipelineExecutor::Microbatch> pipeline_microbatches_;
  std::unique_ptr<core::Arena> device_bin_arena_;
  model::PackedBin device_bin_;
  packing::Schedule schedule_;
  std::vector<std::int64_t> real_lengths_;
  std::vector<packing::PackedSeqParams> microbatch_params_;
  std::vector<std::vector<data::Sample>> microbatch_samples_;
};

}  // namespace dyncp::train
