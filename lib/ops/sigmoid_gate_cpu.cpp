#include <cmath>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/sigmoid_gate.hpp"

namespace dyncp::ops {
namespace {

template <typename T>
T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

// rows of x for the row gate: numel / last dim.
std::int64_t gate_rows(std::string_view op, const Tensor& x, const Tensor& gate) {
  const std::int64_t n = x.shape().last();
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  detail::require_defined(op, "gate", gate);
  if (gate.numel() != rows) {
    detail::fail(op, "gate " + gate.describe() + " must hold one logit per row of x " +
                         x.describe() + " (" + std::to_string(rows) + ")");
  }
  return rows;
}

}  // namespace

void sigmoid_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                          const Tensor& out) {
  constexpr std::string_view op = "sigmoid_gate_forward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &x}, {"gate", &gate}, {"out", &out}});
  detail::require_shape(op, "gate", gate, x.shape());
  detail::require_shape(op, "out", out, x.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).sigmoid_gate_forward(ctx, x, gate, out);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* gs = gate.data<T>();
    T* os = out.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) os[i] = xs[i] * sigmoid(gs[i]);
  });
}

void sigmoid_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                           const Tensor& gate, const Tensor& dx, const Tensor& dgate) {
  constexpr std::string_view op = "sigmoid_gate_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dout", &dout}, {"x", &x}, {"gate", &gate}, {"dx", &dx}, {"dgate", &dgate}});
  detail::require_shape(op, "gate", gate, x.shape());
  detail::require_shape(op, "dout", dout, x.shape());
  if (dx.defined()) detail::require_shape(op, "dx", dx, x.shape());
  if (dgate.defined()) detail::require_shape(op, "dgate", dgate, x.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).sigmoid_gate_backward(ctx, dout, x, gate, dx, dgate);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* gs = gate.data<T>();
    const T* ds = dout.data<T>();
    T* dxs = dx.defined() ? dx.data<T>() : nullptr;
    T* dgs = dgate.defined() ? dgate.data<T>() : nullptr;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const T s = sigmoid(gs[i]);
      const T d = ds[i];
      if (dgs != nullptr) dgs[i] = d * xs[i] * s * (T(1) - s);
      if (dxs != nullptr) dxs[i] = d * s;
    }
  });
}

void sigmoid_row_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                              const Tensor& out, GradMode out_mode) {
  constexpr std::string_view op = "sigmoid_row_gate_forward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &x}, {"gate", &gate}, {"out", &out}});
  detail::require_shape(op, "out", out, x.shape());
  const std::int64_t rows = gate_rows(op, x, gate);
  const bool accumulate = out_mode == GradMode::accumulate;
  if (accumulate && out.raw_data() == x.raw_data() && x.numel() > 0)
    detail::fail(op, "out must not alias x when accumulating");
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).sigmoid_row_gate_forward(ctx, x, gate, out, out_mode);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* gs = gate.data<T>();
    T* os = out.data<T>();
    const std::int64_t n = rows == 0 ? 0 : x.numel() / rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T s = sigmoid(gs[r]);
      for (std::int64_t j = 0; j < n; ++j) {
        const T value = s * xs[r * n + j];
        os[r * n + j] = accumulate ? os[r * n + j] + value : value;
      }
    }
  });
}

void sigmoid_row_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                               const Tensor& gate, const Tensor& dx, const Tensor& dgate) {
  constexpr std::string_view op = "sigmoid_row_gate_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dout", &dout}, {"x", &x}, {"gate", &gate}, {"dx", &dx}, {"dgate", &dgate}});
  detail::require_shape(op, "dout", dout, x.shape());
  const std::int64_t rows = gate_rows(op, x, gate);
  if (dx.defined()) detail::require_shape(op, "dx", dx, x.shape());
  if (dgate.defined()) detail::require_shape(op, "dgate", dgate, gate.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).sigmoid_row_gate_backward(ctx, dout, x, gate, dx, dgate);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* gs = gate.data<T>();
    const T* ds = dout.data<T>();
    T* dxs = dx.defined() ? dx.data<T>() : nullptr;
    T* dgs = dgate.defined() ? dgate.data<T>() : nullptr;
    const std::int64_t n = rows == 0 ? 0 : x.numel() / rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T s = sigmoid(gs[r]);
      T dot = 0;
      for (std::int64_t j = 0; j < n; ++j) dot += ds[r * n + j] * xs[r * n + j];
      if (dgs != nullptr) dgs[r] = dot * s * (T(1) - s);
      if (dxs != nullptr) {
        for (std::int64_t j = 0; j < n; ++j) dxs[r * n + j] = s * ds[r * n + j];
      }
    }
  });
}

}  // namespace dyncp::ops
