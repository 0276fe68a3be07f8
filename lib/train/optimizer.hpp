#pragma once
// AdamW over the parameter ranges this rank owns (parallel::ParameterPartition): every dense
// parameter, and the experts of this rank's EP index. Moments are fp32 flat buffers the size
// of the parameter buffer (only owned ranges are touched). Weight decay is off for norm
// weights. Gradient normalisation and clipping arrive as one `grad_scale`.

#include <cstdint>
#include <vector>

#include "model/qwen3_moe_parameters.hpp"
#include "ops/adamw.hpp"
#include "parallel/parameter_partition.hpp"

namespace dyncp::train {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                 const parallel::ParameterPartition& partition, const AdamWSettings& settings);

  // One update with learning rate `lr`; `step` counts from 1 (bias correction).
  void step(double lr, std::int64_t step, double grad_scale);

  core::Tensor exp_avg() const { return exp_avg_; }
  core::Tensor exp_avg_sq() const { return exp_avg_sq_; }
  // Bytes of optimizer state this rank actually uses (owned ranges x 2 moments x 4 bytes).
  std::int64_t owned_state_bytes() const;

 private:
  struct RangeViews {
    core::Tensor param, grad, exp_avg, exp_avg_sq;
    bool weight_decay;
  };
  AdamWSettings settings_;
  const parallel::ParameterPartition& partition_;
  core::Tensor exp_avg_;
  core::Tensor exp_avg_sq_;
  std::vector<RangeViews> ranges_;
};

}  // namespace dyncp::train
