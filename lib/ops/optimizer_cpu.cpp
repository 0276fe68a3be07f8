// AdamW step, gradient norms and element-wise helpers on CPU.

#include <cmath>
#include <string>
#include <tuple>

#include "ops/adamw.hpp"
#include "ops/device_ops.hpp"
#include "ops/elementwise.hpp"
#include "ops/grad_norm.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {

namespace {

// Moments stored as bf16 (the precision-aware optimizer): each element is widened to fp32, updated
// with the same arithmetic as the fp32 path and rounded to nearest even on the way back, so only
// the storage differs. Either moment may be bf16 independently.
struct Bf16Moment {
  std::uint16_t* bits;
  float load(std::int64_t i) const { return core::bf16_bits_to_float(bits[i]); }
  void store(std::int64_t i, float value) const { bits[i] = core::float_to_bf16_bits(value); }
};

template <typename T>
struct PlainMoment {
  T* values;
  T load(std::int64_t i) const { return values[i]; }
  void store(std::int64_t i, T value) const { values[i] = value; }
};

template <typename T, typename M, typename V>
void adamw_loop(const Tensor& param, const Tensor& grad, M m, V v, const AdamWParams& params,
                bool apply_weight_decay, double bias1, double bias2) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  const T b1 = static_cast<T>(params.beta1), b2 = static_cast<T>(params.beta2),
          eps = static_cast<T>(params.eps);
  const T decay = apply_weight_decay ? static_cast<T>(params.lr * params.weight_decay) : T(0);
  const T scale = static_cast<T>(params.grad_scale);
  const T step_size = static_cast<T>(params.lr / bias1);
  const T inv_sqrt_bias2 = static_cast<T>(1.0 / std::sqrt(bias2));
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    const T gi = g[i] * scale;
    p[i] -= decay * p[i];
    const T mi = b1 * m.load(i) + (T(1) - b1) * gi;
    const T vi = b2 * v.load(i) + (T(1) - b2) * gi * gi;
    m.store(i, mi);
    v.store(i, vi);
    // m̂ / (sqrt(v̂) + eps) with m̂ = m / bias1, v̂ = v / bias2, from the moments as stored
    p[i] -= step_size * m.load(i) / (std::sqrt(v.load(i)) * inv_sqrt_bias2 + eps);
  }
}

}  // namespace

void adamw_step(const OpContext& ctx, const Tensor& param, const Tensor& grad,
                const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWParams& params,
                bool apply_weight_decay) {
  constexpr std::string_view op = "adamw_step";
  detail::require_float_operands_on_any_device(op, ctx, {{"param", &param}, {"grad", &grad}});
  const bool bf16_avg = exp_avg.defined() && exp_avg.dtype() == DType::bf16;
  const bool bf16_avg_sq = exp_avg_sq.defined() && exp_avg_sq.dtype() == DType::bf16;
  for (const auto& [name, moment, bf16] : {std::tuple{"exp_avg", &exp_avg, bf16_avg},
                                           std::tuple{"exp_avg_sq", &exp_avg_sq, bf16_avg_sq}}) {
    if (bf16) {
      detail::require_device(op, ctx, name, *moment);
      if (param.dtype() != DType::f32)
        detail::fail(op, std::string(name) + " in bf16 needs f32 param, got " + param.describe());
    } else {
      detail::require_dtype(op, name, *moment, param.dtype());
      detail::require_device(op, ctx, name, *moment);
    }
  }
  detail::require_shape(op, "grad", grad, param.shape());
  detail::require_shape(op, "exp_avg", exp_avg, param.shape());
  detail::require_shape(op, "exp_avg_sq", exp_avg_sq, param.shape());
  if (params.step < 1) detail::fail(op, "step must be >= 1, got " + std::to_string(params.step));
  if (ctx.device == Device::cuda) {
    return detail::device_ops(op).adamw_step(ctx, param, grad, exp_avg, exp_avg_sq, params,
                                             apply_weight_decay);
  }
  const double bias1 = 1.0 - std::pow(params.beta1, static_cast<double>(params.step));
  const double bias2 = 1.0 - std::pow(params.beta2, static_cast<double>(params.step));
  if (bf16_avg || bf16_avg_sq) {
    const auto run = [&](auto m, auto v) {
      adamw_loop<float>(param, grad, m, v, params, apply_weight_decay, bias1, bias2);
    };
    if (bf16_avg && bf16_avg_sq) {
      run(Bf16Moment{exp_avg.bf16_bits()}, Bf16Moment{exp_avg_sq.bf16_bits()});
    } else if (bf16_avg) {
      run(Bf16Moment{exp_avg.bf16_bits()}, PlainMoment<float>{exp_avg_sq.data<float>()});
    } else {
      run(PlainMoment<float>{exp_avg.data<float>()}, Bf16Moment{exp_avg_sq.bf16_bits()});
    }
    return;
  }
  detail::dispatch_float(op, param.dtype(), [&](auto zero) {
    using T = decltype(zero);
    adamw_loop<T>(param, grad, PlainMoment<T>{exp_avg.data<T>()},
                  PlainMoment<T>{exp_avg_sq.data<T>()}, params, apply_weight_decay, bias1, bias2);
  });
}

double sum_of_squares(const OpContext& ctx, const Tensor& x) {
  constexpr std::string_view op = "sum_of_squares";
  detail::require_float_operands_on_any_device(op, ctx, {{"x", &x}});
  double total = 0;
  if (ctx.device == Device::cuda) return detail::device_ops(op).sum_of_squares(ctx, x);
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* v = x.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      total += static_cast<double>(v[i]) * static_cast<double>(v[i]);
  });
  return total;
}

double local_grad_norm(const OpContext& ctx, std::span<const Tensor> grads) {
  double total = 0;
  for (const Tensor& g : grads) total += sum_of_squares(ctx, g);
  return std::sqrt(total);
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0 || total_norm <= max_norm) return 1.0;
  return max_norm / (total_norm + 1e-6);
}

void add(const OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr std::string_view op = "add";
  detail::require_float_operands_on_any_device(op, ctx, {{"a", &a}, {"b", &b}, {"out", &out}});
  if (a.numel() != b.numel() || a.numel() != out.numel()) {
    detail::fail(op, a.describe() + " + " + b.describe() + " -> " + out.describe());
  }
  if (ctx.device == Device::cuda) return detail::device_ops(op).add(ctx, a, b, out);
  detail::dispatch_float(op, a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* z = out.data<T>();
    for (std::int64_t i = 0; i < a.numel(); ++i) z[i] = x[i] + y[i];
  });
}

void axpy(const OpContext& ctx, double alpha, const Tensor& x, const Tensor& y) {
  constexpr std::string_view op = "axpy";
  detail::require_float_operands(op, ctx, {{"x", &x}, {"y", &y}});
  if (x.numel() != y.numel()) detail::fail(op, x.describe() + " into " + y.describe());
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T a = static_cast<T>(alpha);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) ys[i] += a * xs[i];
  });
}

void scale(const OpContext& ctx, const Tensor& x, double factor) {
  constexpr std::string_view op = "scale";
  detail::require_float_operands(op, ctx, {{"x", &x}});
  detail::dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T f = static_cast<T>(factor);
    T* xs = x.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) xs[i] *= f;
  });
}

void zero(const OpContext& ctx, const Tensor& x) {
  detail::require_cpu_context("zero", ctx);
  detail::require_device("zero", ctx, "x", x);
  x.fill_zero();
}

namespace {

double read_element(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[i];
    case DType::f64:
      return t.data<double>()[i];
    case DType::bf16:
      return core::bf16_bits_to_float(t.bf16_bits()[i]);
    default:
      return 0;
  }
}

}  // namespace

void convert(const OpContext& ctx, const Tensor& src, const Tensor& dst) {
  constexpr std::string_view op = "convert";
  for (const Tensor* t : {&src, &dst}) {
    detail::require_defined(op, "src/dst", *t);
    detail::require_device(op, ctx, "src/dst", *t);
    if (t->dtype() != DType::f32 && t->dtype() != DType::f64 && t->dtype() != DType::bf16) {
      detail::fail(op, "supports f32, f64 and bf16, got " + t->describe());
    }
  }
  if (src.numel() != dst.numel()) detail::fail(op, src.describe() + " into " + dst.describe());
  if (ctx.device == Device::cuda) {
    const bool f32_bf16 = (src.dtype() == DType::f32 && dst.dtype() == DType::bf16) ||
                          (src.dtype() == DType::bf16 && dst.dtype() == DType::f32);
    if (!f32_bf16)
      detail::fail(op, "on the device converts f32 <-> bf16 only, got " + src.describe() +
                           " into " + dst.describe());
    return detail::device_ops(op).convert(ctx, src, dst);
  }
  for (std::int64_t i = 0; i < src.numel(); ++i) {
    const double value = read_element(src, i);
    switch (dst.dtype()) {
      case DType::f32:
        dst.data<float>()[i] = static_cast<float>(value);
        break;
      case DType::f64:
        dst.data<double>()[i] = value;
        break;
      default:
        dst.bf16_bits()[i] = core::float_to_bf16_bits(static_cast<float>(value));
        break;
    }
  }
}

}  // namespace dyncp::ops
