#include <cmath>
#include <string>
#include <vector>

#include "ops/device_ops.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops {
namespace {

std::int64_t check_common(std::string_view op, const Tensor& x, const Tensor& z,
                          const Tensor& weight, const Tensor& inv_rms) {
  const std::int64_t n = x.shape().last();
  if (x.rank() < 1 || n == 0)
    detail::fail(op, "x must have a non-empty last dim, got " + x.describe());
  detail::require_shape(op, "z", z, x.shape());
  detail::require_shape(op, "weight", weight, Shape{n});
  detail::require_shape(op, "saved.inv_rms", inv_rms, Shape{x.numel() / n});
  return n;
}

// x (the rule output) and z in bf16 storage (bf16 activations) beside fp32 weight, outputs and
// statistics; any other dtype mix is refused.
bool bf16_inputs(std::string_view op, const OpContext& ctx, const Tensor& x, const Tensor& z,
                 const Tensor& weight) {
  if (x.dtype() != DType::bf16 && z.dtype() != DType::bf16) return false;
  if (x.dtype() != DType::bf16 || z.dtype() != DType::bf16 || weight.dtype() != DType::f32) {
    detail::fail(op, "bf16 storage needs both x and z in bf16 beside f32 weight and outputs, got " +
                         x.describe() + ", " + z.describe() + ", " + weight.describe());
  }
  detail::require_device(op, ctx, "x", x);
  detail::require_device(op, ctx, "z", z);
  return true;
}

// A bf16 tensor widened exactly into `values`, viewed as f32 of its shape.
Tensor widened(const Tensor& t, std::vector<float>& values) {
  values.resize(static_cast<std::size_t>(t.numel()));
  const std::uint16_t* bits = t.bf16_bits();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = core::bf16_bits_to_float(bits[i]);
  return Tensor::view_of(values.data(), t.shape(), DType::f32);
}

template <typename T>
T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

}  // namespace

void gated_rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& z,
                           const Tensor& weight, double eps, const Tensor& y, RmsNormSaved& saved) {
  constexpr std::string_view op = "gated_rmsnorm_forward";
  const bool bf16_in = bf16_inputs(op, ctx, x, z, weight);
  const Tensor float_x = bf16_in ? Tensor{} : x, float_z = bf16_in ? Tensor{} : z;
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &float_x},
                                                {"z", &float_z},
                                                {"weight", &weight},
                                                {"y", &y},
                                                {"saved.inv_rms", &saved.inv_rms}});
  const std::int64_t n = check_common(op, x, z, weight, saved.inv_rms);
  detail::require_shape(op, "y", y, x.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_rmsnorm_forward(ctx, x, z, weight, eps, y, saved);
  if (bf16_in) {
    std::vector<float> xs, zs;
    return gated_rmsnorm_forward(ctx, widened(x, xs), widened(z, zs), weight, eps, y, saved);
  }
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* zs = z.data<T>();
    const T* w = weight.data<T>();
    T* ys = y.data<T>();
    T* inv = saved.inv_rms.data<T>();
    const std::int64_t rows = x.numel() / n;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      const T* zr = zs + r * n;
      T* yr = ys + r * n;
      const T rr = T(1) / std::sqrt(detail::dot_product(xr, xr, n) / static_cast<T>(n) +
                                    static_cast<T>(eps));
      inv[r] = rr;
      for (std::int64_t j = 0; j < n; ++j) yr[j] = w[j] * (xr[j] * rr) * (zr[j] * sigmoid(zr[j]));
    }
  });
}

void gated_rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                            const Tensor& z, const Tensor& weight, const RmsNormSaved& saved,
                            const Tensor& dx, const Tensor& dz, const Tensor& dweight) {
  constexpr std::string_view op = "gated_rmsnorm_backward";
  const bool bf16_in = bf16_inputs(op, ctx, x, z, weight);
  const Tensor float_x = bf16_in ? Tensor{} : x, float_z = bf16_in ? Tensor{} : z;
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dy", &dy},
                                                {"x", &float_x},
                                                {"z", &float_z},
                                                {"weight", &weight},
                                                {"saved.inv_rms", &saved.inv_rms},
                                                {"dx", &dx},
                                                {"dz", &dz},
                                                {"dweight", &dweight}});
  const std::int64_t n = check_common(op, x, z, weight, saved.inv_rms);
  detail::require_shape(op, "dy", dy, x.shape());
  if (dx.defined()) detail::require_shape(op, "dx", dx, x.shape());
  if (dz.defined()) detail::require_shape(op, "dz", dz, x.shape());
  if (dweight.defined()) detail::require_shape(op, "dweight", dweight, weight.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_rmsnorm_backward(ctx, dy, x, z, weight, saved, dx, dz,
                                                         dweight);
  if (bf16_in) {
    std::vector<float> xs, zs;
    return gated_rmsnorm_backward(ctx, dy, widened(x, xs), widened(z, zs), weight, saved, dx, dz,
                                  dweight);
  }
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* zs = z.data<T>();
    const T* dys = dy.data<T>();
    const T* w = weight.data<T>();
    const T* inv = saved.inv_rms.data<T>();
    T* dxs = dx.defined() ? dx.data<T>() : nullptr;
    T* dzs = dz.defined() ? dz.data<T>() : nullptr;
    T* dw = dweight.defined() ? dweight.data<T>() : nullptr;
    const std::int64_t rows = x.numel() / n;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      const T* zr = zs + r * n;
      const T* dyr = dys + r * n;
      const T rr = inv[r];
      // x̂·G with G = dy ⊙ w ⊙ silu(z); read every input of the row before writing (dx / dz
      // may alias dy).
      T dot = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const T silu = zr[j] * sigmoid(zr[j]);
        dot += xr[j] * rr * dyr[j] * w[j] * silu;
        if (dw != nullptr) dw[j] += dyr[j] * xr[j] * rr * silu;
      }
      const T coeff = dot / static_cast<T>(n);
      for (std::int64_t j = 0; j < n; ++j) {
        const T s = sigmoid(zr[j]);
        const T silu = zr[j] * s;
        const T xhat = xr[j] * rr;
        const T dyw = dyr[j] * w[j];
        if (dzs != nullptr) dzs[r * n + j] = dyw * xhat * s * (T(1) + zr[j] * (T(1) - s));
        if (dxs != nullptr) dxs[r * n + j] = rr * (dyw * silu - xhat * coeff);
      }
    }
  });
}

}  // namespace dyncp::ops
