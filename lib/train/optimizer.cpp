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

// fp32 <-> the stored dtype on the host; a plain copy when both are fp32 (bit-identical to
// before).
void convert_into(const Tensor& src, const Tensor& dst) {
  if (src.raw_data() == dst.raw_data()) return;
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
  } else {
    ops::convert(ops::OpContext{}, src, dst);
  }
}

// A moment as host fp32 (the checkpoint form): itself when it already is, else a host copy,
// widened from bf16 exactly.
Tensor host_f32(const Tensor& moment) {
  if (moment.device() == core::Device::cpu && moment.dtype() == DType::f32) return moment;
  Tensor host = moment;
  if (moment.device() != core::Device::cpu) {
    host = Tensor::empty(moment.shape(), moment.dtype());
    host.copy_from(moment);  // checkpoint writers and readers are host code
  }
  if (host.dtype() == DType::f32) return host;
  const Tensor widened = Tensor::empty(moment.shape(), DType::f32);
  convert_into(host, widened);
  return widened;
}

// `stored` (the optimizer's moment, host or device, fp32 or bf16) from host fp32 values: bf16
// rounds to nearest even on the host, then one copy up.
void store_from_host_f32(const Tensor& values, const Tensor& stored) {
  if (stored.device() == core::Device::cpu) return convert_into(values, stored);
  if (stored.dtype() == DType::f32) return stored.copy_from(values);
  const Tensor rounded = Tensor::empty(stored.shape(), stored.dtype());
  convert_into(values, rounded);
  stored.copy_from(rounded);
}

}  // namespace

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               const parallel::ParameterPartition& partition,
                               const AdamWSettings& settings)
    : settings_(settings),
      values_(parameters.all_values()),
      full_shape_(parameters.all_values().shape()),
      device_(parameters.device()),
      exp_avg_(
          Tensor::zeros(full_shape_, moment_dtype(settings.exp_avg_dtype, "exp_avg"), device_)),
      exp_avg_sq_(Tensor::zeros(full_shape_, moment_dtype(settings.exp_avg_sq_dtype, "exp_avg_sq"),
                                device_)),
      owned_elements_(partition.dense_elements + partition.expert_elements) {
  for (const parallel::ParameterRange& range : partition.ranges)
    add_range(parameters, range, range.offset);
  moment_ranges_ = partition.ranges;
}

AdamWOptimizer::AdamWOptimizer(const model::Qwen3MoeParameters& parameters,
                               parallel::ShardedStateSync& sync, const AdamWSettings& settings)
    : settings_(settings),
      sync_(&sync),
      values_(parameters.all_values()),
      full_shape_(parameters.all_values().shape()),
      device_(parameters.device()),
      exp_avg_(Tensor::zeros({sync.shards().owned_elements},
                             moment_dtype(settings.exp_avg_dtype, "exp_avg"), device_)),
      exp_avg_sq_(Tensor::zeros({sync.shards().owned_elements},
                                moment_dtype(settings.exp_avg_sq_dtype, "exp_avg_sq"), device_)),
      owned_elements_(sync.shards().owned_elements) {
  std::int64_t packed = 0;
  for (const parallel::ParameterRange& range : sync.shards().owned_ranges) {
    add_range(parameters, range, packed);
    packed += range.count;
  }
  DYNCP_CHECK(packed == owned_elements_, "owned ranges add up to the owned elements");
  moment_ranges_ = sync.shards().owned_ranges;
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
  // A gather still reading the pieces must finish before they change (the forward has
  // normally waited for every bucket).
  if (sync_ != nullptr) sync_->complete_parameter_gather();
  for (const RangeViews& range : ranges_) {
    ops::adamw_step(context, range.param, range.grad, range.exp_avg, range.exp_avg_sq, params,
                    range.weight_decay);
  }
  // Overlapped (ddp.overlap_param_gather): started here, waited for by the next forward.
  if (sync_ != nullptr) sync_->gather_parameters(values_);
}

AdamWOptimizer::FullSizeMoments AdamWOptimizer::full_size_moments() const {
  if (sync_ != nullptr)
    return {Tensor::zeros(full_shape_, DType::f32), Tensor::zeros(full_shape_, DType::f32)};
  return {host_f32(exp_avg_), host_f32(exp_avg_sq_)};
}

AdamWOptimizer::HostMoments AdamWOptimizer::host_moments() const {
  return {host_f32(exp_avg_), host_f32(exp_avg_sq_), sync_ != nullptr};
}

void AdamWOptimizer::gather_full_size_moments(const FullSizeMoments& full) {
  if (sync_ == nullptr) return;
  // Host pieces gathered over the host channel (a GPU run's checkpoint state goes through host
  // copies of its device moments).
  sync_->all_gather(full.exp_avg, host_f32(exp_avg_));
  sync_->all_gather(full.exp_avg_sq, host_f32(exp_avg_sq_));
}

void AdamWOptimizer::load_full_size_moments(const FullSizeMoments& full) {
  DYNCP_CHECK(full.exp_avg.shape() == full_shape_ && full.exp_avg_sq.shape() == full_shape_,
              "full-size moments are laid out like the parameters");
  if (sync_ == nullptr) {
    store_from_host_f32(full.exp_avg, exp_avg_);
    store_from_host_f32(full.exp_avg_sq, exp_avg_sq_);
    return;
  }
  // This rank's pieces packed on the host, then stored (one copy up on the GPU).
  for (const auto& [from, stored] :
       {std::pair{&full.exp_avg, &exp_avg_}, std::pair{&full.exp_avg_sq, &exp_avg_sq_}}) {
    const Tensor packed = Tensor::empty({owned_elements_}, DType::f32);
    std::int64_t at = 0;
    for (const parallel::ParameterRange& range : sync_->shards().owned_ranges) {
      view(packed, at, range.count).copy_from(view(*from, range.offset, range.count));
      at += range.count;
    }
    store_from_host_f32(packed, *stored);
  }
}

}  // namespace dyncp::train
