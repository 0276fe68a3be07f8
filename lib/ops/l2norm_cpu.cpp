#include <cmath>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/l2norm.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops {
namespace {

std::int64_t check_common(std::string_view op, const Tensor& x, const Tensor& inv_norm) {
  const std::int64_t n = x.shape().last();
  if (x.rank() < 1 || n == 0)
    detail::fail(op, "input must have a non-empty last dim, got " + x.describe());
  detail::require_shape(op, "saved.inv_norm", inv_norm, Shape{x.numel() / n});
  return n;
}

}  // namespace

void l2norm_forward(const OpContext& ctx, const Tensor& x, double eps, const Tensor& y,
                    L2NormSaved& saved) {
  constexpr std::string_view op = "l2norm_forward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"x", &x}, {"y", &y}, {"saved.inv_norm", &saved.inv_norm}});
  const std::int64_t n = check_common(op, x, saved.inv_norm);
  detail::require_shape(op, "y", y, x.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).l2norm_forward(ctx, x, eps, y, saved);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    T* inv = saved.inv_norm.data<T>();
    const std::int64_t rows = x.numel() / n;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      const T rho = T(1) / std::sqrt(detail::dot_product(xr, xr, n) + static_cast<T>(eps));
      inv[r] = rho;
      for (std::int64_t j = 0; j < n; ++j) ys[r * n + j] = xr[j] * rho;
    }
  });
}

void l2norm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y,
                     const L2NormSaved& saved, const Tensor& dx) {
  constexpr std::string_view op = "l2norm_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dy", &dy}, {"y", &y}, {"saved.inv_norm", &saved.inv_norm}, {"dx", &dx}});
  const std::int64_t n = check_common(op, y, saved.inv_norm);
  detail::require_shape(op, "dy", dy, y.shape());
  detail::require_shape(op, "dx", dx, y.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).l2norm_backward(ctx, dy, y, saved, dx);
  detail::dispatch_float(op, y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* ys = y.data<T>();
    const T* dys = dy.data<T>();
    const T* inv = saved.inv_norm.data<T>();
    T* dxs = dx.data<T>();
    const std::int64_t rows = y.numel() / n;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* yr = ys + r * n;
      const T* dyr = dys + r * n;
      const T proj = detail::dot_product(yr, dyr, n);
      const T rho = inv[r];
      for (std::int64_t j = 0; j < n; ++j) dxs[r * n + j] = rho * (dyr[j] - yr[j] * proj);
    }
  });
}

}  // namespace dyncp::ops
