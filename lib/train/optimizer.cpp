#include "train/optimizer.hpp"

namespace dyncp::train {

using core::DType;
using core::Tensor;

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               const parallel::ParameterPartition& partition,
                               const AdamWSettings& settings)
    : settings_(settings),
      partition_(partition),
      exp_avg_(Tensor::zeros(parameters.all_values().shape(), DType::f32)),
      exp_avg_sq_(Tensor::zeros(parameters.all_values().shape(), DType::f32)) {
  const auto view = [](const Tensor& flat, const parallel::ParameterRange& range) {
    return Tensor::view_of(flat.data<float>() + range.offset, {range.count}, DType::f32);
  };
  for (const parallel::ParameterRange& range : partition.ranges) {
    ranges_.push_back({view(parameters.all_values(), range), view(parameters.all_grads(), range),
                       view(exp_avg_, range), view(exp_avg_sq_, range), range.weight_decay});
  }
}

void AdamWOptimizer::step(double lr, std::int64_t step, double grad_scale) {
  ops::AdamWParams params;
  params.lr = lr;
  params.beta1 = settings_.beta1;
  params.beta2 = settings_.beta2;
  params.eps = settings_.eps;
  params.weight_decay = settings_.weight_decay;
  params.step = step;
  params.grad_scale = grad_scale;
  const ops::OpContext context;
  for (const RangeViews& range : ranges_) {
    ops::adamw_step(context, range.param, range.grad, range.exp_avg, range.exp_avg_sq, params,
                    range.weight_decay);
  }
}

std::int64_t AdamWOptimizer::owned_state_bytes() const {
  return 2 * 4 * (partition_.dense_elements + partition_.expert_elements);
}

}  // namespace dyncp::train
