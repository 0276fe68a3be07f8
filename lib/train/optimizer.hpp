#pragma once
// AdamW over the parameter ranges this rank owns (parallel::ParameterPartition): every dense
// parameter, and the experts of this rank's EP index (the only ones the model holds). Weight
// decay is off for norm weights.
// Gradient normalisation and clipping arrive as one `grad_scale`.
//
// Two ways to hold the state:
//   replicated   moments the size of this rank's parameter buffer;
//   distributed  (ddp.use_distributed_optimizer) moments only for this rank's pieces
//                (parallel::OptimizerShards: 1/pool of the dense state, 1/expert-DP of its
//                experts' state), packed; each step updates the pieces of the parameters and
//                all-gathers them back (parallel::ShardedStateSync).
// Checkpoints see full-size moments either way (full_size_moments and the calls after it).
//
// Each moment is stored in fp32 or, for the precision-aware optimizer, bf16 (update math in
// fp32, ops::adamw_step). The full-size checkpoint form is always fp32: bf16 widens to it
// exactly and rounds back to the same bits, and fp32 moments round to nearest even on loading
// into a bf16 run.
//
// The moments live where the parameters do (host or device, ops::adamw_step dispatching on
// it); the full-size form is always host memory, so a GPU run saves and resumes through host
// copies and its checkpoints are the CPU path's, bit for bit.

#include <cstdint>
#include <vector>

#include "model/qwen3_moe_parameters.hpp"
#include "ops/adamw.hpp"
#include "parallel/parameter_partition.hpp"
#include "parallel/sharded_state_sync.hpp"

namespace dyncp::train {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  core::DType exp_avg_dtype = core::DType::f32;     // f32 or bf16
  core::DType exp_avg_sq_dtype = core::DType::f32;  // f32 or bf16
};

class AdamWOptimizer {
 public:
  // Replicated state.
  AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                 const parallel::ParameterPartition& partition, const AdamWSettings& settings);
  // Distributed state: the gradients given to step() must have been reduce-scattered by
  // `sync` (train::StepEngine does so when its options ask for the distributed optimizer).
  AdamWOptimizer(const model::Qwen3MoeParameters& parameters, parallel::ShardedStateSync& sync,
                 const AdamWSettings& settings);

  // One update with learning rate `lr`; `step` counts from 1 (bias correction). Distributed:
  // collective (the parameter all-gather; with ddp.overlap_param_gather only started, and the
  // next forward or StepEngine::complete_parameter_gather waits for it).
  void step(double lr, std::int64_t step, double grad_scale);

  bool distributed() const { return sync_ != nullptr; }
  // The moments held: full-size (replicated) or this rank's pieces packed in owned_ranges
  // order (distributed).
  core::Tensor exp_avg() const { return exp_avg_; }
  core::Tensor exp_avg_sq() const { return exp_avg_sq_; }
  // Bytes of optimizer state this rank uses (owned elements x (bytes of exp_avg + exp_avg_sq)).
  std::int64_t owned_state_bytes() const {
    return static_cast<std::int64_t>(exp_avg_.nbytes() + exp_avg_sq_.nbytes());
  }

  // Moments laid out like parameters.all_values(), the layout-independent checkpoint form.
  struct FullSizeMoments {
    core::Tensor exp_avg;
    core::Tensor exp_avg_sq;
  };
  // Host fp32. Replicated: the optimizer's own buffers when they are host fp32, else host fp32
  // copies of them. Distributed: new zeroed buffers.
  FullSizeMoments full_size_moments() const;
  // Distributed: every owner's pieces into `full` (collective; afterwards the dense ranges and
  // this EP index's experts are complete, as in the replicated buffers). Replicated: nothing.
  void gather_full_size_moments(const FullSizeMoments& full);
  // Takes this rank's state from full-size moments (as read from a checkpoint).
  void load_full_size_moments(const FullSizeMoments& full);

  // This rank's moments on the host in fp32 without gathering anything, as the sharded
  // checkpoint writer reads them (train/sharded_checkpoint.hpp): the distributed optimizer's
  // pieces packed in owned_ranges order (packed), else full-size. The optimizer's own buffers
  // when they are host fp32, else copies.
  struct HostMoments {
    core::Tensor exp_avg;
    core::Tensor exp_avg_sq;
    bool packed = false;
  };
  HostMoments host_moments() const;
  // The flat ranges (of all_values()) whose moments this rank keeps: what a loader must fill.
  const std::vector<parallel::ParameterRange>& moment_ranges() const { return moment_ranges_; }

 private:
  struct RangeViews {
    core::Tensor param, grad, exp_avg, exp_avg_sq;
    bool weight_decay;
  };
  void add_range(const model::Qwen3MoeParameters& parameters, const parallel::ParameterRange& range,
                 std::int64_t moment_offset);

  AdamWSettings settings_;
  parallel::ShardedStateSync* sync_ = nullptr;
  core::Tensor values_;  // the parameters' flat buffer (all_values())
  core::Shape full_shape_;
  core::Device device_ = core::Device::cpu;
  core::Tensor exp_avg_;
  core::Tensor exp_avg_sq_;
  std::int64_t owned_elements_ = 0;
  std::vector<RangeViews> ranges_;
  std::vector<parallel::ParameterRange> moment_ranges_;
};

}  // namespace dyncp::train
