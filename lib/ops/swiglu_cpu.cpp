#include <cmath>
#include <string>
#include <vector>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"
#include "ops/swiglu.hpp"

namespace dyncp::ops {
namespace {

// fast_exp: vectorisable float exp (~2 ulp), std::exp for double.
template <typename T>
T sigmoid(T a) {
  return T(1) / (T(1) + detail::fast_exp<T>(-a));
}

// Row-strided kernels shared by the split and fused layouts. Always inlined so that the float
// entry points below compile them once per instruction set.
template <typename T>
[[gnu::always_inline]] inline void forward_rows(std::int64_t rows, std::int64_t width,
                                                const T* gate, const T* up, std::int64_t in_stride,
                                                T* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* a = gate + r * in_stride;
    const T* b = up + r * in_stride;
    T* m = out + r * width;
    for (std::int64_t j = 0; j < width; ++j) m[j] = a[j] * sigmoid(a[j]) * b[j];
  }
}

template <typename T>
[[gnu::always_inline]] inline void backward_rows(std::int64_t rows, std::int64_t width,
                                                 const T* dout, const T* gate, const T* up,
                                                 std::int64_t in_stride, T* dgate, T* dup) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* dm = dout + r * width;
    const T* a = gate + r * in_stride;
    const T* b = up + r * in_stride;
    T* da = dgate + r * in_stride;
    T* db = dup + r * in_stride;
    for (std::int64_t j = 0; j < width; ++j) {
      const T s = sigmoid(a[j]);
      const T silu = a[j] * s;
      da[j] = dm[j] * b[j] * s * (T(1) + a[j] * (T(1) - s));
      db[j] = dm[j] * silu;
    }
  }
}

// float versions, built for AVX2 and for the baseline; the loader picks by CPU feature.
DYNCP_AVX2_CLONES void forward_rows_f32(std::int64_t rows, std::int64_t width, const float* gate,
                                        const float* up, std::int64_t in_stride, float* out) {
  forward_rows<float>(rows, width, gate, up, in_stride, out);
}

DYNCP_AVX2_CLONES void backward_rows_f32(std::int64_t rows, std::int64_t width, const float* dout,
                                         const float* gate, const float* up, std::int64_t in_stride,
                                         float* dgate, float* dup) {
  backward_rows<float>(rows, width, dout, gate, up, in_stride, dgate, dup);
}

template <typename T>
void run_forward(std::int64_t rows, std::int64_t width, const T* gate, const T* up,
                 std::int64_t in_stride, T* out) {
  if constexpr (sizeof(T) == sizeof(float)) {
    forward_rows_f32(rows, width, gate, up, in_stride, out);
  } else {
    forward_rows<T>(rows, width, gate, up, in_stride, out);
  }
}

template <typename T>
void run_backward(std::int64_t rows, std::int64_t width, const T* dout, const T* gate, const T* up,
                  std::int64_t in_stride, T* dgate, T* dup) {
  if constexpr (sizeof(T) == sizeof(float)) {
    backward_rows_f32(rows, width, dout, gate, up, in_stride, dgate, dup);
  } else {
    backward_rows<T>(rows, width, dout, gate, up, in_stride, dgate, dup);
  }
}

// gate_up in bf16 storage (bf16 activations) beside fp32 out / dout / dgate_up: each element
// widened exactly, then the fp32 arithmetic above. Any other dtype mix is refused.
bool bf16_gate_up(std::string_view op, const OpContext& ctx, const Tensor& gate_up,
                  const Tensor& fp32_operand) {
  if (!gate_up.defined() || gate_up.dtype() != DType::bf16) return false;
  detail::require_device(op, ctx, "gate_up", gate_up);
  if (fp32_operand.dtype() != DType::f32)
    detail::fail(op, "a bf16 gate_up needs f32 outputs, got " + fp32_operand.describe());
  return true;
}

std::vector<float> widened_rows(const Tensor& gate_up) {
  std::vector<float> values(static_cast<std::size_t>(gate_up.numel()));
  const std::uint16_t* bits = gate_up.bf16_bits();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = core::bf16_bits_to_float(bits[i]);
  return values;
}

}  // namespace

void swiglu_forward(const OpContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  constexpr std::string_view op = "swiglu_forward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"gate", &gate}, {"up", &up}, {"out", &out}});
  detail::require_shape(op, "up", up, gate.shape());
  detail::require_shape(op, "out", out, gate.shape());
  const std::int64_t width = gate.shape().last(), rows = width == 0 ? 0 : gate.numel() / width;
  if (ctx.device == Device::cuda) return detail::device_ops(op).swiglu_forward(ctx, gate, up, out);
  detail::dispatch_float(op, gate.dtype(), [&](auto zero) {
    using T = decltype(zero);
    run_forward<T>(rows, width, gate.data<T>(), up.data<T>(), width, out.data<T>());
  });
}

void swiglu_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup) {
  constexpr std::string_view op = "swiglu_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dout", &dout}, {"gate", &gate}, {"up", &up}, {"dgate", &dgate}, {"dup", &dup}});
  for (const auto* t : {&dout, &up, &dgate, &dup})
    detail::require_shape(op, "operand", *t, gate.shape());
  const std::int64_t width = gate.shape().last(), rows = width == 0 ? 0 : gate.numel() / width;
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).swiglu_backward(ctx, dout, gate, up, dgate, dup);
  detail::dispatch_float(op, gate.dtype(), [&](auto zero) {
    using T = decltype(zero);
    run_backward<T>(rows, width, dout.data<T>(), gate.data<T>(), up.data<T>(), width,
                    dgate.data<T>(), dup.data<T>());
  });
}

void swiglu_fused_forward(const OpContext& ctx, const Tensor& gate_up, const Tensor& out) {
  constexpr std::string_view op = "swiglu_fused_forward";
  const bool bf16_in = bf16_gate_up(op, ctx, gate_up, out);
  const Tensor float_gate_up = bf16_in ? Tensor{} : gate_up;
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"gate_up", &float_gate_up}, {"out", &out}});
  const Tensor gu = gate_up.as_matrix(), om = out.as_matrix();
  if (gu.size(1) != 2 * om.size(1) || gu.size(0) != om.size(0)) {
    detail::fail(op,
                 "gate_up " + gate_up.describe() + " must be [rows, 2I] for out " + out.describe());
  }
  const std::int64_t width = om.size(1), rows = om.size(0);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).swiglu_fused_forward(ctx, gate_up, out);
  if (bf16_in) {
    const std::vector<float> base = widened_rows(gate_up);
    return run_forward<float>(rows, width, base.data(), base.data() + width, 2 * width,
                              om.data<float>());
  }
  detail::dispatch_float(op, out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* base = gu.data<T>();
    run_forward<T>(rows, width, base, base + width, 2 * width, om.data<T>());
  });
}

void swiglu_fused_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate_up,
                           const Tensor& dgate_up) {
  constexpr std::string_view op = "swiglu_fused_backward";
  const bool bf16_in = bf16_gate_up(op, ctx, gate_up, dout);
  const Tensor float_gate_up = bf16_in ? Tensor{} : gate_up;
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dout", &dout}, {"gate_up", &float_gate_up}, {"dgate_up", &dgate_up}});
  detail::require_shape(op, "dgate_up", dgate_up, gate_up.shape());
  const Tensor gu = gate_up.as_matrix(), dm = dout.as_matrix();
  if (gu.size(1) != 2 * dm.size(1) || gu.size(0) != dm.size(0)) {
    detail::fail(
        op, "gate_up " + gate_up.describe() + " must be [rows, 2I] for dout " + dout.describe());
  }
  const std::int64_t width = dm.size(1), rows = dm.size(0);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).swiglu_fused_backward(ctx, dout, gate_up, dgate_up);
  if (bf16_in) {
    const std::vector<float> base = widened_rows(gate_up);
    float* grad = dgate_up.data<float>();
    return run_backward<float>(rows, width, dm.data<float>(), base.data(), base.data() + width,
                               2 * width, grad, grad + width);
  }
  detail::dispatch_float(op, dout.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* base = gu.data<T>();
    T* grad = dgate_up.data<T>();
    run_backward<T>(rows, width, dm.data<T>(), base, base + width, 2 * width, grad, grad + width);
  });
}

}  // namespace dyncp::ops
