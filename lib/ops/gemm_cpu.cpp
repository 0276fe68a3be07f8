#include <string>

#include "ops/bf16_operands.hpp"
#include "ops/blas.hpp"
#include "ops/device_ops.hpp"
#include "ops/gemm.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

using detail::fail;

std::string dims(std::int64_t rows, std::int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

}  // namespace

void gemm(const OpContext& ctx, const Tensor& a, Transpose transpose_a, const Tensor& b,
          Transpose transpose_b, const Tensor& c, double alpha, bool accumulate) {
  constexpr std::string_view op = "gemm";
  detail::require_float_operands_on_any_device(op, ctx, {{"a", &a}, {"b", &b}, {"c", &c}});
  const Tensor am = a.as_matrix(), bm = b.as_matrix(), cm = c.as_matrix();
  const bool ta = transpose_a == Transpose::yes, tb = transpose_b == Transpose::yes;
  const std::int64_t m = ta ? am.size(1) : am.size(0), k = ta ? am.size(0) : am.size(1);
  const std::int64_t kb = tb ? bm.size(1) : bm.size(0), n = tb ? bm.size(0) : bm.size(1);
  if (k != kb || cm.size(0) != m || cm.size(1) != n) {
    fail(op, "op(a) " + dims(m, k) + " · op(b) " + dims(kb, n) + " cannot give c " +
                 c.shape().to_string() + " (a " + a.describe() + ", b " + b.describe() + ")");
  }
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gemm(ctx, a, transpose_a, b, transpose_b, c, alpha, accumulate);
  if (detail::bf16_products(op, ctx, a)) {
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return gemm(detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, a), transpose_a,
                detail::bf16_rounded_copy(scratch, b), transpose_b, c, alpha, accumulate);
  }
  detail::dispatch_float(op, a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    detail::blas_gemm<T>(ta, tb, m, n, k, static_cast<T>(alpha), am.data<T>(), am.size(1),
                         bm.data<T>(), bm.size(1), accumulate ? T(1) : T(0), cm.data<T>(), n);
  });
}

namespace {

// Rows of a linear: x holds rows × in elements (any shape), y / dy rows × out.
std::int64_t linear_rows(std::string_view op, const Tensor& x, const Tensor& weight,
                         const Tensor& y, std::string_view y_name) {
  detail::require_rank(op, "weight", weight, 2);
  const std::int64_t out_dim = weight.size(0), in_dim = weight.size(1);
  const std::int64_t rows = in_dim == 0 ? 0 : x.numel() / in_dim;
  if (in_dim == 0 || x.shape().last() != in_dim || y.numel() != rows * out_dim) {
    fail(op, "x " + x.describe() + " · weight " + weight.describe() + "ᵀ does not give " +
                 std::string(y_name) + " " + y.describe() +
                 " (rows x in · [out, in]ᵀ = rows x out)");
  }
  return rows;
}

}  // namespace

void linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& y) {
  constexpr std::string_view op = "linear_forward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &x}, {"weight", &weight}, {"y", &y}});
  const std::int64_t rows = linear_rows(op, x, weight, y, "y");
  const std::int64_t out_dim = weight.size(0), in_dim = weight.size(1);
  if (ctx.device == Device::cuda) {
    return detail::device_ops(op).gemm(ctx, x.reshape({rows, in_dim}), Transpose::no, weight,
                                       Transpose::yes, y.reshape({rows, out_dim}), 1.0, false);
  }
  if (detail::bf16_products(op, ctx, x)) {
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return linear_forward(detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, x),
                          detail::bf16_rounded_copy(scratch, weight), y);
  }
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    detail::blas_gemm<T>(false, true, rows, out_dim, in_dim, T(1), x.data<T>(), in_dim,
                         weight.data<T>(), in_dim, T(0), y.data<T>(), out_dim);
  });
}

void linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& dx, const Tensor& dweight, GradMode dx_mode) {
  constexpr std::string_view op = "linear_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"dx", &dx}, {"dweight", &dweight}});
  const std::int64_t rows = linear_rows(op, x, weight, dy, "dy");
  const std::int64_t out_dim = weight.size(0), in_dim = weight.size(1);
  if (dx.defined() && dx.numel() != x.numel()) {
    fail(op, "dx " + dx.describe() + " must match x " + x.describe());
  }
  if (dweight.defined()) detail::require_shape(op, "dweight", dweight, weight.shape());
  if (ctx.device == Device::cuda) {
    DeviceOps& device = detail::device_ops(op);
    const Tensor dy_rows = dy.reshape({rows, out_dim});
    if (dx.defined()) {
      device.gemm(ctx, dy_rows, Transpose::no, weight, Transpose::no, dx.reshape({rows, in_dim}),
                  1.0, dx_mode == GradMode::accumulate);
    }
    if (dweight.defined()) {
      device.gemm(ctx, dy_rows, Transpose::yes, x.reshape({rows, in_dim}), Transpose::no, dweight,
                  1.0, true);
    }
    return;
  }
  if (detail::bf16_products(op, ctx, x)) {
    // dx from bf16 dy and w; dw += bf16 dyᵀ · bf16 x, accumulated in fp32 (main_grad).
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return linear_backward(detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, dy),
                           detail::bf16_rounded_copy(scratch, x),
                           detail::bf16_rounded_copy(scratch, weight), dx, dweight, dx_mode);
  }
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (dx.defined()) {
      detail::blas_gemm<T>(false, false, rows, in_dim, out_dim, T(1), dy.data<T>(), out_dim,
                           weight.data<T>(), in_dim, dx_mode == GradMode::accumulate ? T(1) : T(0),
                           dx.data<T>(), in_dim);
    }
    if (dweight.defined()) {
      detail::blas_gemm<T>(true, false, out_dim, in_dim, rows, T(1), dy.data<T>(), out_dim,
                           x.data<T>(), in_dim, T(1), dweight.data<T>(), in_dim);
    }
  });
}

namespace {

// x in bf16 storage (bf16 activations: the experts' kept rows) under bf16 products, which read
// it as the rounded operand it is; refused with fp32 products.
bool bf16_rows(std::string_view op, const OpContext& ctx, const Tensor& x) {
  if (!x.defined() || x.dtype() != DType::bf16) return false;
  detail::require_device(op, ctx, "x", x);
  if (ctx.precision != ComputePrecision::bf16)
    fail(op, "a bf16 x needs bf16 products (mixed_precision: bf16_mixed), got " + x.describe());
  return true;
}

void check_grouped(std::string_view op, const OpContext& ctx, const Tensor& x, const Tensor& weight,
                   const Tensor& group_offsets, const Tensor& y) {
  detail::require_rank(op, "weight", weight, 3);
  detail::require_dtype(op, "group_offsets", group_offsets, DType::i64);
  if (group_offsets.device() != Device::cpu && group_offsets.device() != ctx.device)
    fail(op, "group_offsets must be on the host or on the op's device");
  const std::int64_t experts = weight.size(0);
  detail::require_shape(op, "group_offsets", group_offsets, Shape{experts + 1});
  const Tensor xm = x.as_matrix();
  const Tensor ym = y.as_matrix();
  const std::int64_t out_dim = weight.size(1), in_dim = weight.size(2);
  if (xm.size(1) != in_dim || ym.size(1) != out_dim || xm.size(0) != ym.size(0)) {
    fail(op, "x " + x.describe() + ", weight " + weight.describe() + " and y/dy " + y.describe() +
                 " do not fit [rows, in] · [E, out, in]ᵀ = [rows, out]");
  }
  // Device offsets stay there (the point of them: no synchronisation); the kernels clamp them.
  if (group_offsets.device() != Device::cpu) return;
  const auto* offsets = group_offsets.data<std::int64_t>();
  if (offsets[0] != 0 || offsets[experts] != xm.size(0)) {
    fail(op, "group_offsets must start at 0 and end at rows = " + std::to_string(xm.size(0)) +
                 ", got " + std::to_string(offsets[0]) + " .. " + std::to_string(offsets[experts]));
  }
  for (std::int64_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] < offsets[e]) {
      fail(op, "group_offsets decrease at expert " + std::to_string(e));
    }
  }
}

}  // namespace

void grouped_linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                            const Tensor& group_offsets, const Tensor& y) {
  constexpr std::string_view op = "grouped_linear_forward";
  const Tensor float_x = bf16_rows(op, ctx, x) ? Tensor{} : x;
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &float_x}, {"weight", &weight}, {"y", &y}});
  check_grouped(op, ctx, x, weight, group_offsets, y);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).grouped_linear_forward(ctx, x, weight, group_offsets, y);
  if (detail::bf16_products(op, ctx, x)) {
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return grouped_linear_forward(detail::with_fp32_products(ctx),
                                  detail::bf16_rounded_copy(scratch, x),
                                  detail::bf16_rounded_copy(scratch, weight), group_offsets, y);
  }
  const auto* offsets = group_offsets.data<std::int64_t>();
  const std::int64_t experts = weight.size(0), out_dim = weight.size(1), in_dim = weight.size(2);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* ws = weight.data<T>();
    T* ys = y.data<T>();
    for (std::int64_t e = 0; e < experts; ++e) {
      const std::int64_t rows = offsets[e + 1] - offsets[e];
      if (rows == 0) continue;
      detail::blas_gemm<T>(false, true, rows, out_dim, in_dim, T(1), xs + offsets[e] * in_dim,
                           in_dim, ws + e * out_dim * in_dim, in_dim, T(0),
                           ys + offsets[e] * out_dim, out_dim);
    }
  });
}

void grouped_linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, const Tensor& group_offsets, const Tensor& dx,
                             const Tensor& dweight, GradMode dx_mode) {
  constexpr std::string_view op = "grouped_linear_backward";
  const Tensor float_x = bf16_rows(op, ctx, x) ? Tensor{} : x;
  detail::require_float_operands_on_any_device(
      op, ctx,
      {{"dy", &dy}, {"x", &float_x}, {"weight", &weight}, {"dx", &dx}, {"dweight", &dweight}});
  check_grouped(op, ctx, x, weight, group_offsets, dy);
  if (dx.defined() && dx.shape() != x.shape())
    fail(op, "dx " + dx.describe() + " must match x " + x.describe());
  if (dweight.defined()) detail::require_shape(op, "dweight", dweight, weight.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).grouped_linear_backward(ctx, dy, x, weight, group_offsets, dx,
                                                          dweight, dx_mode);
  if (detail::bf16_products(op, ctx, x)) {
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return grouped_linear_backward(
        detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, dy),
        detail::bf16_rounded_copy(scratch, x), detail::bf16_rounded_copy(scratch, weight),
        group_offsets, dx, dweight, dx_mode);
  }
  const auto* offsets = group_offsets.data<std::int64_t>();
  const std::int64_t experts = weight.size(0), out_dim = weight.size(1), in_dim = weight.size(2);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* dys = dy.data<T>();
    const T* ws = weight.data<T>();
    for (std::int64_t e = 0; e < experts; ++e) {
      const std::int64_t rows = offsets[e + 1] - offsets[e];
      if (rows == 0) continue;
      if (dx.defined()) {
        detail::blas_gemm<T>(false, false, rows, in_dim, out_dim, T(1), dys + offsets[e] * out_dim,
                             out_dim, ws + e * out_dim * in_dim, in_dim,
                             dx_mode == GradMode::accumulate ? T(1) : T(0),
                             dx.data<T>() + offsets[e] * in_dim, in_dim);
      }
      if (dweight.defined()) {
        detail::blas_gemm<T>(true, false, out_dim, in_dim, rows, T(1), dys + offsets[e] * out_dim,
                             out_dim, xs + offsets[e] * in_dim, in_dim, T(1),
                             dweight.data<T>() + e * out_dim * in_dim, in_dim);
      }
    }
  });
}

}  // namespace dyncp::ops
