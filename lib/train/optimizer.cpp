#include "train/optimizer.hpp"

#include <cstring>

#include "core/error.hpp"

namespace dyncp::train {

using core::DType;
using core::Tensor;

namespace {

Tensor view(const Tensor& flat, std::int64_t offset, std::int64_t count) {
  return Tensor::view_of(flat.data<float>() + offset, {count}, DType::f32);
}

}  // namespace

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               const parallel::ParameterPartition& partition,
                               const AdamWSettings& settings)
    : settings_(settings),
      values_(parameters.all_values().data<float>()),
      full_shape_(parameters.all_values().shape()),
      exp_avg_(Tensor::zeros(full_shape_, DType::f32)),
      exp_avg_sq_(Tensor::zeros(full_shape_, DType::f32)),
      owned_elements_(partition.dense_elements + partition.expert_elements) {
  for (const parallel::ParameterRange& range : partition.ranges)
    add_range(parameters, range, range.offset);
}

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               parallel::ShardedStateSync& sync, const AdamWSettings& settings)
    : settings_(settings),
      sync_(&sync),
      values_(parameters.all_values().data<float>()),
      full_shape_(parameters.all_values().shape()),
      exp_avg_(Tensor::zeros({sync.shards().owned_elements}, DType::f32)),
      exp_avg_sq_(Tensor::zeros({sync.shards().owned_elements}, DType::f32)),
      owned_elements_(sync.shards().owned_elements) {
  std::int64_t packed = 0;
  for (const parallel::ParameterRange& range : sync.shards().owned_ranges) {
    add_range(parameters, range, packed);
    packed += range.count;
  }
  DYNCP_CHECK(packed == owned_elements_, "owned ranges add up to the owned elements");
}

void AdamWOptimizer::add_range(const model::Qwen3MoeParameters& parameters,
                               const parallel::ParameterRange& range, std::int64_t moment_offset) {
  ranges_.push_back({view(parameters.all_values(), range.offset, range.count),
                     view(parameters.all_grads(), range.offset, range.count),
                     view(exp_avg_, moment_offset, range.count),
                     view(exp_avg_sq_, moment_offset, range.count), range.weight_decay});
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
  if (sync_ != nullptr) sync_->all_gather(values_);
}

AdamWOptimizer::FullSizeMoments AdamWOptimizer::full_size_moments() const {
  if (sync_ == nullptr) return {exp_avg_, exp_avg_sq_};
  return {Tensor::zeros(full_shape_, DType::f32), Tensor::zeros(full_shape_, DType::f32)};
}

void AdamWOptimizer::gather_full_size_moments(const FullSizeMoments& full) {
  if (sync_ == nullptr) return;
  sync_->all_gather(full.exp_avg.data<float>(), exp_avg_.data<float>());
  sync_->all_gather(full.exp_avg_sq.data<float>(), exp_avg_sq_.data<float>());
}

void AdamWOptimizer::load_full_size_moments(const FullSizeMoments& full) {
  DYNCP_CHECK(full.exp_avg.shape() == full_shape_ && full.exp_avg_sq.shape() == full_shape_,
              "full-size moments are laid out like the parameters");
  if (sync_ == nullptr) {
    if (full.exp_avg.raw_data() != exp_avg_.raw_data()) exp_avg_.copy_from(full.exp_avg);
    if (full.exp_avg_sq.raw_data() != exp_avg_sq_.raw_data())
      exp_avg_sq_.copy_from(full.exp_avg_sq);
    return;
  }
  std::int64_t packed = 0;
  for (const parallel::ParameterRange& range : sync_->shards().owned_ranges) {
    const auto bytes = static_cast<std::size_t>(range.count) * sizeof(float);
    std::memcpy(exp_avg_.data<float>() + packed, full.exp_avg.data<float>() + range.offset, bytes);
    std::memcpy(exp_avg_sq_.data<float>() + packed, full.exp_avg_sq.data<float>() + range.offset,
                bytes);
    packed += range.count;
  }
}

}  // namespace dyncp::train
