#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/router.hpp"

namespace dyncp::ops {

void router_forward(const OpContext& ctx, const Tensor& logits, int top_k, bool normalize_top_k,
                    const Tensor& expert_ids, const Tensor& weights, RouterSaved& saved) {
  constexpr std::string_view op = "router_forward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"logits", &logits}, {"weights", &weights}, {"saved.probs", &saved.probs}});
  detail::require_rank(op, "logits", logits, 2);
  const std::int64_t tokens = logits.size(0), experts = logits.size(1);
  if (top_k < 1 || top_k > experts) {
    detail::fail(op, "top_k " + std::to_string(top_k) + " must be in [1, " +
                         std::to_string(experts) + "] for logits " + logits.describe());
  }
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_shape(op, "expert_ids", expert_ids, Shape{tokens, top_k});
  detail::require_shape(op, "weights", weights, Shape{tokens, top_k});
  detail::require_shape(op, "saved.probs", saved.probs, logits.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).router_forward(ctx, logits, top_k, normalize_top_k, expert_ids,
                                                 weights, saved);
  detail::dispatch_float(op, logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* l = logits.data<T>();
    T* p = saved.probs.data<T>();
    std::int32_t* ids = expert_ids.data<std::int32_t>();
    T* w = weights.data<T>();
    for (std::int64_t t = 0; t < tokens; ++t) {
      const T* lt = l + t * experts;
      T* pt = p + t * experts;
      T max_logit = -std::numeric_limits<T>::infinity();
      for (std::int64_t e = 0; e < experts; ++e) max_logit = std::max(max_logit, lt[e]);
      T sum = 0;
      for (std::int64_t e = 0; e < experts; ++e) {
        pt[e] = std::exp(lt[e] - max_logit);
        sum += pt[e];
      }
      for (std::int64_t e = 0; e < experts; ++e) pt[e] /= sum;
      // Selection by repeated max: k is small (<= 10 in every released model). Strict '>' keeps
      // the lower index on ties; a chosen expert is marked by its id already being in the list.
      std::int32_t* chosen = ids + t * top_k;
      T selected_sum = 0;
      for (int j = 0; j < top_k; ++j) {
        std::int64_t best = -1;
        for (std::int64_t e = 0; e < experts; ++e) {
          bool taken = false;
          for (int m = 0; m < j; ++m) taken = taken || chosen[m] == e;
          if (taken) continue;
          if (best < 0 || pt[e] > pt[best]) best = e;
        }
        chosen[j] = static_cast<std::int32_t>(best);
        w[t * top_k + j] = pt[best];
        selected_sum += pt[best];
      }
      if (normalize_top_k) {
        for (int j = 0; j < top_k; ++j) w[t * top_k + j] /= selected_sum;
      }
    }
  });
}

void balanced_router_forward(const OpContext& ctx, const Tensor& logits, const Tensor& positions,
                             int layer, int top_k, bool normalize_top_k, const Tensor& expert_ids,
                             const Tensor& weights, RouterSaved& saved) {
  constexpr std::string_view op = "balanced_router_forward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"logits", &logits}, {"weights", &weights}, {"saved.probs", &saved.probs}});
  detail::require_rank(op, "logits", logits, 2);
  const std::int64_t tokens = logits.size(0), experts = logits.size(1);
  if (top_k < 1 || top_k > experts || layer < 0) {
    detail::fail(op, "top_k " + std::to_string(top_k) + " must be in [1, " +
                         std::to_string(experts) + "] and layer " + std::to_string(layer) +
                         " >= 0 for logits " + logits.describe());
  }
  detail::require_dtype(op, "positions", positions, DType::i32);
  detail::require_shape(op, "positions", positions, Shape{tokens});
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_shape(op, "expert_ids", expert_ids, Shape{tokens, top_k});
  detail::require_shape(op, "weights", weights, Shape{tokens, top_k});
  detail::require_shape(op, "saved.probs", saved.probs, logits.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).balanced_router_forward(
        ctx, logits, positions, layer, top_k, normalize_top_k, expert_ids, weights, saved);
  detail::dispatch_float(op, logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* l = logits.data<T>();
    const std::int32_t* pos = positions.data<std::int32_t>();
    T* p = saved.probs.data<T>();
    std::int32_t* ids = expert_ids.data<std::int32_t>();
    T* w = weights.data<T>();
    for (std::int64_t t = 0; t < tokens; ++t) {
      const T* lt = l + t * experts;
      T* pt = p + t * experts;
      T max_logit = -std::numeric_limits<T>::infinity();
      for (std::int64_t e = 0; e < experts; ++e) max_logit = std::max(max_logit, lt[e]);
      T sum = 0;
      for (std::int64_t e = 0; e < experts; ++e) {
        pt[e] = std::exp(lt[e] - max_logit);
        sum += pt[e];
      }
      for (std::int64_t e = 0; e < experts; ++e) pt[e] /= sum;
      // A negative position (none is made here) still maps into [0, E).
      const std::int64_t base =
          (static_cast<std::int64_t>(pos[t]) * top_k + layer) % experts + experts;
      T selected_sum = 0;
      for (int j = 0; j < top_k; ++j) {
        const std::int64_t e = (base + j) % experts;
        ids[t * top_k + j] = static_cast<std::int32_t>(e);
        w[t * top_k + j] = pt[e];
        selected_sum += pt[e];
      }
      if (normalize_top_k) {
        for (int j = 0; j < top_k; ++j) w[t * top_k + j] /= selected_sum;
      }
    }
  });
}

void router_backward(const OpContext& ctx, const Tensor& dweights, const Tensor& expert_ids,
                     const Tensor& weights, const RouterSaved& saved, bool normalize_top_k,
                     const Tensor& dlogits) {
  constexpr std::string_view op = "router_backward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dweights", &dweights},
                                                {"weights", &weights},
                                                {"saved.probs", &saved.probs},
                                                {"dlogits", &dlogits}});
  detail::require_rank(op, "saved.probs", saved.probs, 2);
  const std::int64_t tokens = saved.probs.size(0), experts = saved.probs.size(1);
  detail::require_rank(op, "weights", weights, 2);
  const std::int64_t top_k = weights.size(1);
  detail::require_shape(op, "weights", weights, Shape{tokens, top_k});
  detail::require_shape(op, "dweights", dweights, weights.shape());
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_shape(op, "expert_ids", expert_ids, weights.shape());
  detail::require_shape(op, "dlogits", dlogits, saved.probs.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).router_backward(ctx, dweights, expert_ids, weights, saved,
                                                  normalize_top_k, dlogits);
  detail::dispatch_float(op, dlogits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = saved.probs.data<T>();
    const T* w = weights.data<T>();
    const T* dw = dweights.data<T>();
    const std::int32_t* ids = expert_ids.data<std::int32_t>();
    T* dl = dlogits.data<T>();
    for (std::int64_t t = 0; t < tokens; ++t) {
      T* dlt = dl + t * experts;
      const T* pt = p + t * experts;
      const T* wt = w + t * top_k;
      const T* dwt = dw + t * top_k;
      const std::int32_t* it = ids + t * top_k;
      std::fill(dlt, dlt + experts, T(0));
      if (normalize_top_k) {
        // w = softmax over the selected logits: dl_e = w_e (dw_e − Σ w_m dw_m)
        T weighted = 0;
        for (std::int64_t j = 0; j < top_k; ++j) weighted += wt[j] * dwt[j];
        for (std::int64_t j = 0; j < top_k; ++j) dlt[it[j]] = wt[j] * (dwt[j] - weighted);
      } else {
        // dp = dw on S; dl = p ⊙ (dp − p·dp)
        T p_dot = 0;
        for (std::int64_t j = 0; j < top_k; ++j) p_dot += pt[it[j]] * dwt[j];
        for (std::int64_t e = 0; e < experts; ++e) dlt[e] = -pt[e] * p_dot;
        for (std::int64_t j = 0; j < top_k; ++j) dlt[it[j]] += pt[it[j]] * dwt[j];
      }
    }
  });
}

}  // namespace dyncp::ops
