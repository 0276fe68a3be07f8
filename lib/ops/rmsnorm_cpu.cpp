#include <cmath>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops {
namespace {

std::int64_t check_common(std::string_view op, const Tensor& x, const Tensor& weight,
                          const Tensor& inv_rms) {
  const std::int64_t n = x.shape().last();
  if (x.rank() < 1 || n == 0)
    detail::fail(op, "x must have a non-empty last dim, got " + x.describe());
  detail::require_shape(op, "weight", weight, Shape{n});
  detail::require_shape(op, "saved.inv_rms", inv_rms, Shape{x.numel() / n});
  return n;
}

}  // namespace

void rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight, double eps,
                     RmsNormVariant variant, const Tensor& y, RmsNormSaved& saved) {
  constexpr std::string_view op = "rmsnorm_forward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"x", &x}, {"weight", &weight}, {"y", &y}, {"saved.inv_rms", &saved.inv_rms}});
  const std::int64_t n = check_common(op, x, weight, saved.inv_rms);
  detail::require_shape(op, "y", y, x.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).rmsnorm_forward(ctx, x, weight, eps, variant, y, saved);
  const bool one_plus = variant == RmsNormVariant::one_plus_weight;
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* w = weight.data<T>();
    T* ys = y.data<T>();
    T* inv = saved.inv_rms.data<T>();
    const std::int64_t rows = x.numel() / n;
    const T weight_offset = one_plus ? T(1) : T(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      T* yr = ys + r * n;
      const T sum_sq = detail::dot_product(xr, xr, n);
      const T rr = T(1) / std::sqrt(sum_sq / static_cast<T>(n) + static_cast<T>(eps));
      inv[r] = rr;
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (weight_offset + w[j]) * (xr[j] * rr);
    }
  });
}

void rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                      RmsNormVariant variant, const RmsNormSaved& saved, const Tensor& dx,
                      const Tensor& dweight, GradMode dx_mode) {
  constexpr std::string_view op = "rmsnorm_backward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dy", &dy},
                                                {"x", &x},
                                                {"weight", &weight},
                                                {"saved.inv_rms", &saved.inv_rms},
                                                {"dx", &dx},
                                                {"dweight", &dweight}});
  const std::int64_t n = check_common(op, x, weight, saved.inv_rms);
  detail::require_shape(op, "dy", dy, x.shape());
  if (dx.defined()) detail::require_shape(op, "dx", dx, x.shape());
  if (dweight.defined()) detail::require_shape(op, "dweight", dweight, weight.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).rmsnorm_backward(ctx, dy, x, weight, variant, saved, dx, dweight,
                                                   dx_mode);
  const bool one_plus = variant == RmsNormVariant::one_plus_weight;
  const bool accumulate = dx_mode == GradMode::accumulate;
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* dys = dy.data<T>();
    const T* w = weight.data<T>();
    const T* inv = saved.inv_rms.data<T>();
    T* dxs = dx.defined() ? dx.data<T>() : nullptr;
    T* dw = dweight.defined() ? dweight.data<T>() : nullptr;
    const std::int64_t rows = x.numel() / n;
    const T weight_offset = one_plus ? T(1) : T(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      const T* dyr = dys + r * n;
      const T rr = inv[r];
      if (dw != nullptr) {
        for (std::int64_t j = 0; j < n; ++j) dw[j] += dyr[j] * xr[j] * rr;
      }
      if (dxs == nullptr) continue;
      // dx = r · (g − x̂ (x̂·g)/n), g = w_eff ⊙ dy;  x̂·g = r · Σ x_j w_eff_j dy_j
      T* dxr = dxs + r * n;
      T partial[8] = {};
      std::int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        for (int u = 0; u < 8; ++u)
          partial[u] += (weight_offset + w[j + u]) * dyr[j + u] * xr[j + u];
      }
      T dot = 0;
      for (; j < n; ++j) dot += (weight_offset + w[j]) * dyr[j] * xr[j];
      for (int u = 0; u < 8; ++u) dot += partial[u];
      const T coeff = dot * rr * rr / static_cast<T>(n);
      for (std::int64_t c = 0; c < n; ++c) {
        const T g = (weight_offset + w[c]) * dyr[c];
        // An overwrite must not read dx: an uninitialised view may hold NaN.
        const T previous = accumulate ? dxr[c] : T(0);
        dxr[c] = previous + rr * (g - xr[c] * coeff);
      }
    }
  });
}

}  // namespace dyncp::ops
