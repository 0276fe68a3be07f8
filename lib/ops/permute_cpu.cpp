#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/permute.hpp"

namespace dyncp::ops {
namespace {

// Sizes of a plan: (tokens, top_k, experts).
struct PlanDims {
  std::int64_t tokens, top_k, experts;
};

PlanDims check_plan(std::string_view op, const PermutePlan& plan, std::int64_t tokens) {
  detail::require_dtype(op, "plan.expert_order", plan.expert_order, DType::i32);
  detail::require_dtype(op, "plan.assignment_row", plan.assignment_row, DType::i32);
  detail::require_dtype(op, "plan.expert_offsets", plan.expert_offsets, DType::i64);
  detail::require_rank(op, "plan.expert_order", plan.expert_order, 1);
  detail::require_shape(op, "plan.assignment_row", plan.assignment_row, plan.expert_order.shape());
  const std::int64_t assignments = plan.expert_order.size(0);
  if (tokens == 0 ? assignments != 0 : assignments % tokens != 0) {
    detail::fail(op, "plan with " + std::to_string(assignments) + " assignments does not fit " +
                         std::to_string(tokens) + " tokens");
  }
  return {tokens, tokens == 0 ? 0 : assignments / tokens, plan.expert_offsets.size(0) - 1};
}

// y_perm may be bf16 storage (bf16 activations, docs/precision.md) beside f32 weights and
// outputs: it is read widened, exactly. Any other dtype mix is refused.
void check_y_perm(std::string_view op, const OpContext& ctx, const Tensor& y_perm,
                  const Tensor& weights) {
  detail::require_defined(op, "y_perm", y_perm);
  detail::require_device(op, ctx, "y_perm", y_perm);
  if (y_perm.dtype() == DType::bf16 && weights.dtype() != DType::f32)
    detail::fail(op, "bf16 y_perm needs f32 weights and outputs, got " + weights.describe());
}

// An element of y_perm as the compute type (a bf16 one widened, exactly).
template <typename T>
T widened(T value) {
  return value;
}
inline float widened(std::uint16_t bf16_bits) {
  return core::bf16_bits_to_float(bf16_bits);
}

// f(pointer to y_perm's elements): its own type, or bf16 bits beside f32 compute.
template <typename T, typename F>
void with_y_perm(const Tensor& y_perm, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (y_perm.dtype() == DType::bf16)
      return f(static_cast<const std::uint16_t*>(y_perm.bf16_bits()));
  }
  f(y_perm.data<T>());
}

}  // namespace

void build_permute_plan(const OpContext& ctx, const Tensor& expert_ids, int num_experts,
                        PermutePlan& plan) {
  constexpr std::string_view op = "build_permute_plan";
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_rank(op, "expert_ids", expert_ids, 2);
  const std::int64_t tokens = expert_ids.size(0), top_k = expert_ids.size(1);
  const std::int64_t assignments = tokens * top_k;
  detail::require_dtype(op, "plan.expert_order", plan.expert_order, DType::i32);
  detail::require_shape(op, "plan.expert_order", plan.expert_order, Shape{assignments});
  detail::require_dtype(op, "plan.assignment_row", plan.assignment_row, DType::i32);
  detail::require_shape(op, "plan.assignment_row", plan.assignment_row, Shape{assignments});
  detail::require_dtype(op, "plan.expert_offsets", plan.expert_offsets, DType::i64);
  detail::require_shape(op, "plan.expert_offsets", plan.expert_offsets, Shape{num_experts + 1});
  if (plan.tokens_per_expert.defined()) {
    detail::require_dtype(op, "plan.tokens_per_expert", plan.tokens_per_expert, DType::i64);
    detail::require_shape(op, "plan.tokens_per_expert", plan.tokens_per_expert, Shape{num_experts});
  }
  detail::require_device(op, ctx, "expert_ids", expert_ids);
  detail::require_device(op, ctx, "plan.expert_order", plan.expert_order);
  detail::require_device(op, ctx, "plan.assignment_row", plan.assignment_row);
  // Host offsets (and counts) are what per-expert products and the expert exchange size their
  // work from; device offsets feed the grouped products without a synchronisation.
  const Device where = plan.expert_offsets.device();
  if (where != Device::cpu && where != ctx.device)
    detail::fail(op, "plan.expert_offsets must be on the host or on the op's device");
  if (plan.tokens_per_expert.defined() &&
      (plan.tokens_per_expert.device() != Device::cpu || where != Device::cpu))
    detail::fail(op, "plan.tokens_per_expert is filled only beside host expert_offsets");
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).build_permute_plan(ctx, expert_ids, num_experts, plan);
  const std::int32_t* ids = expert_ids.data<std::int32_t>();
  std::int64_t* offsets = plan.expert_offsets.data<std::int64_t>();
  std::int32_t* order = plan.expert_order.data<std::int32_t>();
  std::int32_t* row_of = plan.assignment_row.data<std::int32_t>();
  // Counting sort, stable in assignment order (token, then slot): counts into offsets[e + 1],
  // a prefix sum, the offsets as fill cursors (each ends at the next group's start), then
  // shifted back by one.
  std::fill(offsets, offsets + num_experts + 1, std::int64_t{0});
  for (std::int64_t a = 0; a < assignments; ++a) {
    if (ids[a] < 0 || ids[a] >= num_experts) {
      detail::fail(op, "expert id " + std::to_string(ids[a]) + " of token " +
                           std::to_string(a / top_k) + " is outside [0, " +
                           std::to_string(num_experts) + ")");
    }
    ++offsets[ids[a] + 1];
  }
  for (int e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  for (std::int64_t a = 0; a < assignments; ++a) {
    const std::int64_t row = offsets[ids[a]]++;
    order[row] = static_cast<std::int32_t>(a);
    row_of[a] = static_cast<std::int32_t>(row);
  }
  for (int e = num_experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
  if (plan.tokens_per_expert.defined()) {
    std::int64_t* tokens_per_expert = plan.tokens_per_expert.data<std::int64_t>();
    for (int e = 0; e < num_experts; ++e) tokens_per_expert[e] = offsets[e + 1] - offsets[e];
  }
}

void route_and_permute(const OpContext& ctx, const Tensor& logits, int top_k, bool normalize_top_k,
                       const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                       RouterSaved& saved, PermutePlan& plan, const Tensor& x_perm) {
  constexpr std::string_view op = "route_and_permute";
  if (ctx.device != Device::cuda) {
    // The CPU runs the three ops: the same numbers, each checking its arguments.
    router_forward(ctx, logits, top_k, normalize_top_k, expert_ids, weights, saved);
    build_permute_plan(ctx, expert_ids, static_cast<int>(logits.size(1)), plan);
    return permute_forward(ctx, x, plan, x_perm);
  }
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"logits", &logits},
                                                {"x", &x},
                                                {"weights", &weights},
                                                {"saved.probs", &saved.probs},
                                                {"x_perm", &x_perm}});
  detail::require_rank(op, "logits", logits, 2);
  detail::require_rank(op, "x", x, 2);
  const std::int64_t tokens = logits.size(0), experts = logits.size(1);
  if (top_k < 1 || top_k > experts) {
    detail::fail(op, "top_k " + std::to_string(top_k) + " must be in [1, " +
                         std::to_string(experts) + "] for logits " + logits.describe());
  }
  const std::int64_t assignments = tokens * top_k;
  detail::require_shape(op, "x", x, Shape{tokens, x.size(1)});
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_shape(op, "expert_ids", expert_ids, Shape{tokens, top_k});
  detail::require_device(op, ctx, "expert_ids", expert_ids);
  detail::require_shape(op, "weights", weights, Shape{tokens, top_k});
  detail::require_shape(op, "saved.probs", saved.probs, logits.shape());
  detail::require_shape(op, "x_perm", x_perm, Shape{assignments, x.size(1)});
  for (const auto& [name, t] : {std::pair{"plan.expert_order", &plan.expert_order},
                                std::pair{"plan.assignment_row", &plan.assignment_row}}) {
    detail::require_dtype(op, name, *t, DType::i32);
    detail::require_shape(op, name, *t, Shape{assignments});
    detail::require_device(op, ctx, name, *t);
  }
  detail::require_dtype(op, "plan.expert_offsets", plan.expert_offsets, DType::i64);
  detail::require_shape(op, "plan.expert_offsets", plan.expert_offsets, Shape{experts + 1});
  if (plan.tokens_per_expert.defined() && (plan.tokens_per_expert.device() != Device::cpu ||
                                           plan.expert_offsets.device() != Device::cpu ||
                                           plan.tokens_per_expert.shape() != Shape{experts} ||
                                           plan.tokens_per_expert.dtype() != DType::i64))
    detail::fail(op, "plan.tokens_per_expert must be host i64 [E] beside host expert_offsets");
  detail::device_ops(op).route_and_permute(ctx, logits, top_k, normalize_top_k, x, expert_ids,
                                           weights, saved, plan, x_perm);
}

void permute_forward(const OpContext& ctx, const Tensor& x, const PermutePlan& plan,
                     const Tensor& x_perm) {
  constexpr std::string_view op = "permute_forward";
  detail::require_float_operands_on_any_device(op, ctx, {{"x", &x}, {"x_perm", &x_perm}});
  detail::require_rank(op, "x", x, 2);
  const PlanDims dims = check_plan(op, plan, x.size(0));
  detail::require_shape(op, "x_perm", x_perm, Shape{dims.tokens * dims.top_k, x.size(1)});
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).permute_forward(ctx, x, plan, x_perm);
  const std::size_t row_bytes = static_cast<std::size_t>(x.size(1)) * core::dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw_data());
  auto* dst = static_cast<std::byte*>(x_perm.raw_data());
  const std::int32_t* order = plan.expert_order.data<std::int32_t>();
  for (std::int64_t r = 0; r < dims.tokens * dims.top_k; ++r) {
    std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes,
                src + static_cast<std::size_t>(order[r] / dims.top_k) * row_bytes, row_bytes);
  }
}

void permute_backward(const OpContext& ctx, const Tensor& dx_perm, const PermutePlan& plan,
                      const Tensor& dx, GradMode dx_mode) {
  constexpr std::string_view op = "permute_backward";
  detail::require_float_operands_on_any_device(op, ctx, {{"dx_perm", &dx_perm}, {"dx", &dx}});
  detail::require_rank(op, "dx", dx, 2);
  const PlanDims dims = check_plan(op, plan, dx.size(0));
  const std::int64_t hidden = dx.size(1);
  detail::require_shape(op, "dx_perm", dx_perm, Shape{dims.tokens * dims.top_k, hidden});
  const std::int32_t* row_of = plan.assignment_row.data<std::int32_t>();
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).permute_backward(ctx, dx_perm, plan, dx, dx_mode);
  detail::dispatch_float(op, dx.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = dx_perm.data<T>();
    T* dst = dx.data<T>();
    for (std::int64_t t = 0; t < dims.tokens; ++t) {
      T* out = dst + t * hidden;
      if (dx_mode == GradMode::overwrite) std::fill(out, out + hidden, T(0));
      for (std::int64_t j = 0; j < dims.top_k; ++j) {
        const T* in = src + static_cast<std::int64_t>(row_of[t * dims.top_k + j]) * hidden;
        for (std::int64_t c = 0; c < hidden; ++c) out[c] += in[c];
      }
    }
  });
}

void unpermute_forward(const OpContext& ctx, const Tensor& y_perm, const PermutePlan& plan,
                       const Tensor& weights, const Tensor& y) {
  constexpr std::string_view op = "unpermute_forward";
  check_y_perm(op, ctx, y_perm, weights);
  const Tensor same_dtype_y_perm = y_perm.dtype() == DType::bf16 ? Tensor{} : y_perm;
  detail::require_float_operands_on_any_device(
      op, ctx, {{"y_perm", &same_dtype_y_perm}, {"weights", &weights}, {"y", &y}});
  detail::require_rank(op, "y", y, 2);
  const PlanDims dims = check_plan(op, plan, y.size(0));
  const std::int64_t hidden = y.size(1);
  detail::require_shape(op, "y_perm", y_perm, Shape{dims.tokens * dims.top_k, hidden});
  detail::require_shape(op, "weights", weights, Shape{dims.tokens, dims.top_k});
  const std::int32_t* row_of = plan.assignment_row.data<std::int32_t>();
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).unpermute_forward(ctx, y_perm, plan, weights, y);
  detail::dispatch_float(op, y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* w = weights.data<T>();
    T* dst = y.data<T>();
    with_y_perm<T>(y_perm, [&](const auto* src) {
      for (std::int64_t t = 0; t < dims.tokens; ++t) {
        T* out = dst + t * hidden;
        std::fill(out, out + hidden, T(0));
        for (std::int64_t j = 0; j < dims.top_k; ++j) {
          const T wj = w[t * dims.top_k + j];
          const auto* in = src + static_cast<std::int64_t>(row_of[t * dims.top_k + j]) * hidden;
          for (std::int64_t c = 0; c < hidden; ++c) out[c] += wj * widened(in[c]);
        }
      }
    });
  });
}

void unpermute_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y_perm,
                        const PermutePlan& plan, const Tensor& weights, const Tensor& dy_perm,
                        const Tensor& dweights) {
  constexpr std::string_view op = "unpermute_backward";
  check_y_perm(op, ctx, y_perm, weights);
  const Tensor same_dtype_y_perm = y_perm.dtype() == DType::bf16 ? Tensor{} : y_perm;
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dy", &dy},
                                                {"y_perm", &same_dtype_y_perm},
                                                {"weights", &weights},
                                                {"dy_perm", &dy_perm},
                                                {"dweights", &dweights}});
  detail::require_rank(op, "dy", dy, 2);
  const PlanDims dims = check_plan(op, plan, dy.size(0));
  const std::int64_t hidden = dy.size(1);
  detail::require_shape(op, "y_perm", y_perm, Shape{dims.tokens * dims.top_k, hidden});
  detail::require_shape(op, "dy_perm", dy_perm, y_perm.shape());
  detail::require_shape(op, "weights", weights, Shape{dims.tokens, dims.top_k});
  detail::require_shape(op, "dweights", dweights, weights.shape());
  const std::int32_t* row_of = plan.assignment_row.data<std::int32_t>();
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).unpermute_backward(ctx, dy, y_perm, plan, weights, dy_perm,
                                                     dweights);
  detail::dispatch_float(op, dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* g = dy.data<T>();
    const T* w = weights.data<T>();
    T* gp = dy_perm.data<T>();
    T* dw = dweights.data<T>();
    with_y_perm<T>(y_perm, [&](const auto* yp) {
      for (std::int64_t t = 0; t < dims.tokens; ++t) {
        const T* gt = g + t * hidden;
        for (std::int64_t j = 0; j < dims.top_k; ++j) {
          const std::int64_t row = row_of[t * dims.top_k + j];
          const T wj = w[t * dims.top_k + j];
          const auto* in = yp + row * hidden;
          T* out = gp + row * hidden;
          T dot = 0;
          for (std::int64_t c = 0; c < hidden; ++c) {
            out[c] = wj * gt[c];
            dot += gt[c] * widened(in[c]);
          }
          dw[t * dims.top_k + j] = dot;
        }
      }
    });
  });
}

}  // namespace dyncp::ops
