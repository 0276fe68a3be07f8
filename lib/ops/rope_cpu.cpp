#include <cmath>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/rope.hpp"

namespace dyncp::ops {
namespace {

void check(std::string_view op, const OpContext& ctx, const Tensor& in, const Tensor& positions,
           const RopeParams& params, const Tensor& out) {
  detail::require_float_operands_on_any_device(op, ctx, {{"x/dy", &in}, {"y/dx", &out}});
  detail::require_rank(op, "x/dy", in, 3);
  detail::require_shape(op, "y/dx", out, in.shape());
  detail::require_dtype(op, "positions", positions, DType::i32);
  detail::require_shape(op, "positions", positions, Shape{in.size(0)});
  const std::int64_t head_dim = in.size(2);
  if (params.rotary_dim <= 0 || params.rotary_dim % 2 != 0 || params.rotary_dim > head_dim ||
      params.rotary_dim > kMaxRotaryDim) {
    detail::fail(op, "rotary_dim " + std::to_string(params.rotary_dim) +
                         " must be even, positive, <= head_dim " + std::to_string(head_dim) +
                         " and <= " + std::to_string(kMaxRotaryDim));
  }
  if (!(params.theta > 0))
    detail::fail(op, "theta must be positive, got " + std::to_string(params.theta));
}

// direction +1: forward rotation; −1: inverse (backward).
template <typename T>
void rotate(const Tensor& in, const Tensor& positions, const RopeParams& params, const Tensor& out,
            T direction) {
  const std::int64_t tokens = in.size(0), heads = in.size(1), head_dim = in.size(2);
  const std::int64_t half = params.rotary_dim / 2;
  const T* src = in.data<T>();
  T* dst = out.data<T>();
  const std::int32_t* pos = positions.data<std::int32_t>();
  // HF computes inv_freq and the angle in the compute dtype (fp32); so do we.
  const RopeFrequencies table = rope_frequencies(params);
  const T factor = static_cast<T>(table.attention_factor);
  T inv_freq[kMaxRotaryDim / 2];
  T cosines[kMaxRotaryDim / 2];
  T sines[kMaxRotaryDim / 2];
  for (std::int64_t i = 0; i < half; ++i) inv_freq[i] = static_cast<T>(table.inv_freq[i]);
  std::int32_t cached_position = -1;
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (pos[t] != cached_position) {
      cached_position = pos[t];
      for (std::int64_t i = 0; i < half; ++i) {
        const T angle = static_cast<T>(pos[t]) * inv_freq[i];
        cosines[i] = factor * std::cos(angle);
        sines[i] = direction * factor * std::sin(angle);
      }
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = (t * heads + h) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const T x1 = src[base + i], x2 = src[base + i + half];
        dst[base + i] = x1 * cosines[i] - x2 * sines[i];
        dst[base + i + half] = x2 * cosines[i] + x1 * sines[i];
      }
      if (src != dst) {
        for (std::int64_t j = params.rotary_dim; j < head_dim; ++j) dst[base + j] = src[base + j];
      }
    }
  }
}

}  // namespace

void rope_forward(const OpContext& ctx, const Tensor& x, const Tensor& positions,
                  const RopeParams& params, const Tensor& y) {
  constexpr std::string_view op = "rope_forward";
  check(op, ctx, x, positions, params, y);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).rope(ctx, x, positions, params, y, /*inverse=*/false);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    rotate<T>(x, positions, params, y, T(1));
  });
}

void rope_backward(const OpContext& ctx, const Tensor& dy, const Tensor& positions,
                   const RopeParams& params, const Tensor& dx) {
  constexpr std::string_view op = "rope_backward";
  check(op, ctx, dy, positions, params, dx);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).rope(ctx, dy, positions, params, dx, /*inverse=*/true);
  detail::dispatch_float(op, dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    rotate<T>(dy, positions, params, dx, T(-1));
  });
}

}  // namespace dyncp::ops
