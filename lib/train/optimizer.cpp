#include "train/optimizer.hpp"

#include <cstddef>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace dyncp::train {

using core::DType;
using core::Tensor;

namespace {

Tensor view(const Tensor& flat, std::int64_t offset, std::int64_t count) {
  auto* base = static_cast<std::byte*>(flat.raw_data());
  const auto element = static_cast<std::int64_t>(core::dtype_size(flat.dtype()));
  return Tensor::view_of(base + offset * element, {count}, flat.dtype(), flat.device());
}

DType moment_dtype(DType dtype, const char* name) {
  DYNCP_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              std::string(name) + " is f32 or bf16, got " + std::string(core::dtype_name(dtype)));
  return dtype;
}

// fp32 <-> the stored dtype; a plain copy when both are fp32 (bit-identical to before).
void convert_into(const Tensor& src, const Tensor& dst) {
  if (src.raw_data() == dst.raw_data()) return;
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
  } else {
    ops::convert(ops::OpContext{}, src, dst);
  }
}

}  // namespace

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               const parallel::ParameterPartition& partition,
                               const AdamWSettings& settings)
    : settings_(settings),
      values_(parameters.all_values().data<float>()),
      full_shape_(parameters.all_values().shape()),
      device_(parameters.device()),
      exp_avg_(
          Tensor::zeros(full_shape_, moment_dtype(settings.exp_avg_dtype, "exp_avg"), device_)),
      exp_avg_sq_(Tensor::zeros(full_shape_, moment_dtype(settings.exp_avg_sq_dtype, "exp_avg_sq"),
                                device_)),
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
      exp_avg_(Tensor::zeros({sync.shards().owned_elements},
                             moment_dtype(settings.exp_avg_dtype, "exp_avg"))),
      exp_avg_sq_(Tensor::zeros({sync.shards().owned_elements},
                                moment_dtype(settings.exp_avg_sq_dtype, "exp_avg_sq"))),
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
  ops::OpContext context;
  context.device = device_;
  for (const RangeViews& range : ranges_) {
    ops::adamw_step(context, range.param, range.grad, range.exp_avg, range.exp_avg_sq, params,
                    range.weight_decay);
  }
  if (sync_ != nullptr) sync_->all_gather(values_);
}

AdamWOptimizer::FullSizeMoments AdamWOptimizer::full_size_moments() const {
  if (sync_ != nullptr)
    return {Tensor::zeros(full_shape_, DType::f32), Tensor::zeros(full_shape_, DType::f32)};
  FullSizeMoments full;
  for (const auto& [own, out] :
       {std::pair{&exp_avg_, &full.exp_avg}, std::pair{&exp_avg_sq_, &full.exp_avg_sq}}) {
    if (own->device() != core::Device::cpu) {
      // Checkpoint writers and readers are host code: a host copy of the device moments.
      *out = Tensor::empty(full_shape_, own->dtype());
      out->copy_from(*own);
    } else if (own->dtype() == DType::f32) {
      *out = *own;
    } else {
      *out = Tensor::empty(full_shape_, DType::f32);
      convert_into(*own, *out);
    }
  }
  return full;
}

void AdamWOptimizer::gather_full_size_moments(const FullSizeMoments& full) {
  if (sync_ == nullptr) return;
  for (const auto& [own, out] :
       {std::pair{&exp_avg_, &full.exp_avg}, std::pair{&exp_avg_sq_, &full.exp_avg_sq}}) {
    if (own->dtype() == DType::f32) {
      sync_->all_gather(out->data<float>(), own->data<float>());
    } else {
      const Tensor widened = Tensor::empty(own->shape(), DType::f32);
      convert_into(*own, widened);
      sync_->all_gather(out->data<float>(), widened.data<float>());
    }
  }
}

void AdamWOptimizer::load_full_size_moments(const FullSizeMoments& full) {
  DYNCP_CHECK(full.exp_avg.shape() == full_shape_ && full.exp_avg_sq.shape() == full_shape_,
              "full-size moments are laid out like the parameters");
  if (sync_ == nullptr) {
    convert_into(full.exp_avg, exp_avg_);
    convert_into(full.exp_avg_sq, exp_avg_sq_);
    return;
  }
  std::int64_t packed = 0;
  for (const parallel::ParameterRange& range : sync_->shards().owned_ranges) {
    convert_into(view(full.exp_avg, range.offset, range.count),
                 view(exp_avg_, packed, range.count));
    convert_into(view(full.exp_avg_sq, range.offset, range.count),
                 view(exp_avg_sq_, packed, range.count));
    packed += range.count;
  }
}

}  // namespace dyncp::train
