#include <cmath>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

// PyTorch F.softplus(x) with beta 1, threshold 20: x itself above the threshold.
constexpr double kSoftplusThreshold = 20.0;

template <typename T>
T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

template <typename T>
T softplus(T x) {
  return x > T(kSoftplusThreshold) ? x : std::log1p(std::exp(x));
}

template <typename T>
T softplus_derivative(T x) {
  return x > T(kSoftplusThreshold) ? T(1) : sigmoid(x);
}

// Returns (tokens, heads).
std::pair<std::int64_t, std::int64_t> check(std::string_view op, const Tensor& a, const Tensor& b,
                                            const Tensor& A_log, const Tensor& dt_bias) {
  detail::require_rank(op, "a", a, 2);
  detail::require_shape(op, "b", b, a.shape());
  detail::require_shape(op, "A_log", A_log, Shape{a.size(1)});
  detail::require_shape(op, "dt_bias", dt_bias, Shape{a.size(1)});
  return {a.size(0), a.size(1)};
}

}  // namespace

void gated_delta_gates_forward(const OpContext& ctx, const Tensor& a, const Tensor& b,
                               const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
                               const Tensor& beta) {
  constexpr std::string_view op = "gated_delta_gates_forward";
  detail::require_float_operands_on_any_device(
      op, ctx,
      {{"a", &a}, {"b", &b}, {"A_log", &A_log}, {"dt_bias", &dt_bias}, {"g", &g}, {"beta", &beta}});
  const auto [tokens, heads] = check(op, a, b, A_log, dt_bias);
  detail::require_shape(op, "g", g, a.shape());
  detail::require_shape(op, "beta", beta, a.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_gates_forward(ctx, a, b, A_log, dt_bias, g, beta);
  detail::dispatch_float(op, a.dtype(), [&, tokens = tokens, heads = heads](auto zero) {
    using T = decltype(zero);
    const T* as = a.data<T>();
    const T* bs = b.data<T>();
    const T* alog = A_log.data<T>();
    const T* bias = dt_bias.data<T>();
    T* gs = g.data<T>();
    T* betas = beta.data<T>();
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t i = t * heads + h;
        const T bv = bs[i];
        gs[i] = -std::exp(alog[h]) * softplus(as[i] + bias[h]);
        betas[i] = sigmoid(bv);
      }
    }
  });
}

void gated_delta_gates_backward(const OpContext& ctx, const Tensor& dg, const Tensor& dbeta,
                                const Tensor& a, const Tensor& b, const Tensor& A_log,
                                const Tensor& dt_bias, const Tensor& da, const Tensor& db,
                                const Tensor& dA_log, const Tensor& ddt_bias) {
  constexpr std::string_view op = "gated_delta_gates_backward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dg", &dg},
                                                {"dbeta", &dbeta},
                                                {"a", &a},
                                                {"b", &b},
                                                {"A_log", &A_log},
                                                {"dt_bias", &dt_bias},
                                                {"da", &da},
                                                {"db", &db},
                                                {"dA_log", &dA_log},
                                                {"ddt_bias", &ddt_bias}});
  const auto [tokens, heads] = check(op, a, b, A_log, dt_bias);
  for (const auto& [name, t] : {std::pair<std::string_view, const Tensor*>{"dg", &dg},
                                {"dbeta", &dbeta},
                                {"da", &da},
                                {"db", &db}}) {
    if (t->defined()) detail::require_shape(op, name, *t, a.shape());
  }
  if (dA_log.defined()) detail::require_shape(op, "dA_log", dA_log, A_log.shape());
  if (ddt_bias.defined()) detail::require_shape(op, "ddt_bias", ddt_bias, dt_bias.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_gates_backward(ctx, dg, dbeta, a, b, A_log, dt_bias,
                                                             da, db, dA_log, ddt_bias);
  detail::dispatch_float(op, a.dtype(), [&, tokens = tokens, heads = heads](auto zero) {
    using T = decltype(zero);
    const T* dgs = dg.defined() ? dg.data<T>() : nullptr;
    const T* dbetas = dbeta.defined() ? dbeta.data<T>() : nullptr;
    const T* as = a.data<T>();
    const T* bs = b.data<T>();
    const T* alog = A_log.data<T>();
    const T* bias = dt_bias.data<T>();
    T* das = da.defined() ? da.data<T>() : nullptr;
    T* dbs = db.defined() ? db.data<T>() : nullptr;
    T* dalog = dA_log.defined() ? dA_log.data<T>() : nullptr;
    T* dbias = ddt_bias.defined() ? ddt_bias.data<T>() : nullptr;
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t i = t * heads + h;
        const T gdot = dgs != nullptr ? dgs[i] : T(0);
        const T x = as[i] + bias[h];
        const T decay_rate = std::exp(alog[h]);
        const T dx = -gdot * decay_rate * softplus_derivative(x);
        if (das != nullptr) das[i] = dx;
        if (dbias != nullptr) dbias[h] += dx;
        if (dalog != nullptr) dalog[h] += gdot * (-decay_rate * softplus(x));
        if (dbs != nullptr) {
          const T s = sigmoid(bs[i]);
          dbs[i] = (dbetas != nullptr ? dbetas[i] : T(0)) * s * (T(1) - s);
        }
      }
    }
  });
}

}  // namespace dyncp::ops
