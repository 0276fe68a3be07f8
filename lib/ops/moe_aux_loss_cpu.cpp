#include <string>

#include "ops/device_ops.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

void check_sequences(std::string_view op, const Tensor& cu, const Tensor& token_is_real,
                     std::int64_t tokens) {
  detail::require_dtype(op, "seq_cu_seqlens", cu, DType::i32);
  detail::require_rank(op, "seq_cu_seqlens", cu, 1);
  if (cu.device() != Device::cpu) detail::fail(op, "seq_cu_seqlens must be on the host");
  const std::int32_t* c = cu.data<std::int32_t>();
  const std::int64_t n = cu.size(0);
  if (n < 1 || c[0] != 0 || c[n - 1] != tokens) {
    detail::fail(op, "seq_cu_seqlens " + cu.describe() +
                         " must run from 0 to T = " + std::to_string(tokens));
  }
  for (std::int64_t i = 1; i < n; ++i) {
    if (c[i] < c[i - 1]) detail::fail(op, "seq_cu_seqlens decreases at entry " + std::to_string(i));
  }
  if (token_is_real.defined()) {
    detail::require_dtype(op, "token_is_real", token_is_real, DType::u8);
    detail::require_shape(op, "token_is_real", token_is_real, Shape{tokens});
  }
}

}  // namespace

void moe_aux_loss_statistics(const OpContext& ctx, const Tensor& probs, const Tensor& expert_ids,
                             const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                             const Tensor& counts, const Tensor& prob_sums,
                             bool verify_expert_ids) {
  constexpr std::string_view op = "moe_aux_loss_statistics";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"probs", &probs}, {"counts", &counts}, {"prob_sums", &prob_sums}});
  detail::require_device(op, ctx, "expert_ids", expert_ids);
  detail::require_device(op, ctx, "token_is_real", token_is_real);
  detail::require_rank(op, "probs", probs, 2);
  const std::int64_t tokens = probs.size(0), experts = probs.size(1);
  detail::require_dtype(op, "expert_ids", expert_ids, DType::i32);
  detail::require_rank(op, "expert_ids", expert_ids, 2);
  if (expert_ids.size(0) != tokens)
    detail::fail(op, "expert_ids " + expert_ids.describe() + " must have T rows");
  check_sequences(op, seq_cu_seqlens, token_is_real, tokens);
  const std::int64_t sequences = seq_cu_seqlens.size(0) - 1;
  detail::require_shape(op, "counts", counts, Shape{sequences, experts});
  detail::require_shape(op, "prob_sums", prob_sums, Shape{sequences, experts});
  const std::int64_t top_k = expert_ids.size(1);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).moe_aux_loss_statistics(ctx, probs, expert_ids, seq_cu_seqlens,
                                                          token_is_real, counts, prob_sums,
                                                          verify_expert_ids);
  detail::dispatch_float(op, probs.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = probs.data<T>();
    const std::int32_t* ids = expert_ids.data<std::int32_t>();
    const std::int32_t* cu = seq_cu_seqlens.data<std::int32_t>();
    const std::uint8_t* real =
        token_is_real.defined() ? token_is_real.data<std::uint8_t>() : nullptr;
    T* c = counts.data<T>();
    T* ps = prob_sums.data<T>();
    counts.fill_zero();
    prob_sums.fill_zero();
    for (std::int64_t s = 0; s < sequences; ++s) {
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        if (real != nullptr && real[t] == 0) continue;
        for (std::int64_t e = 0; e < experts; ++e) ps[s * experts + e] += p[t * experts + e];
        for (std::int64_t j = 0; j < top_k; ++j) {
          const std::int32_t e = ids[t * top_k + j];
          if (e < 0 || e >= experts) {
            detail::fail(op, "expert id " + std::to_string(e) + " of token " + std::to_string(t) +
                                 " is outside [0, " + std::to_string(experts) + ")");
          }
          c[s * experts + e] += T(1);
        }
      }
    }
  });
}

void moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts, const Tensor& prob_sums,
                         int top_k, double coef, std::int64_t num_sequences_global,
                         const Tensor& grad_coeff, const Tensor& loss_out) {
  constexpr std::string_view op = "moe_aux_loss_finish";
  detail::require_dtype(op, "loss_out", loss_out, DType::f64);
  detail::require_shape(op, "loss_out", loss_out, Shape{1});
  detail::require_device(op, ctx, "loss_out", loss_out);
  if (ctx.device == Device::cuda) {
    // The returning form checks the rest; the device form only skips the copy back.
    detail::require_float_operands_on_any_device(
        op, ctx, {{"counts", &counts}, {"prob_sums", &prob_sums}, {"grad_coeff", &grad_coeff}});
    detail::require_rank(op, "counts", counts, 2);
    detail::require_shape(op, "prob_sums", prob_sums, counts.shape());
    detail::require_shape(op, "grad_coeff", grad_coeff, counts.shape());
    if (top_k < 1 || num_sequences_global < 1)
      detail::fail(op, "top_k and num_sequences_global must be >= 1");
    return detail::device_ops(op).moe_aux_loss_finish_to_device(
        ctx, counts, prob_sums, top_k, coef, num_sequences_global, grad_coeff, loss_out);
  }
  loss_out.data<double>()[0] =
      moe_aux_loss_finish(ctx, counts, prob_sums, top_k, coef, num_sequences_global, grad_coeff);
}

double moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts, const Tensor& prob_sums,
                           int top_k, double coef, std::int64_t num_sequences_global,
                           const Tensor& grad_coeff) {
  constexpr std::string_view op = "moe_aux_loss_finish";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"counts", &counts}, {"prob_sums", &prob_sums}, {"grad_coeff", &grad_coeff}});
  detail::require_rank(op, "counts", counts, 2);
  detail::require_shape(op, "prob_sums", prob_sums, counts.shape());
  detail::require_shape(op, "grad_coeff", grad_coeff, counts.shape());
  if (top_k < 1) detail::fail(op, "top_k must be >= 1, got " + std::to_string(top_k));
  if (num_sequences_global < 1) {
    detail::fail(op,
                 "num_sequences_global must be >= 1, got " + std::to_string(num_sequences_global));
  }
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).moe_aux_loss_finish(ctx, counts, prob_sums, top_k, coef,
                                                      num_sequences_global, grad_coeff);
  const std::int64_t sequences = counts.size(0), experts = counts.size(1);
  double loss = 0;
  detail::dispatch_float(op, counts.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* c = counts.data<T>();
    const T* ps = prob_sums.data<T>();
    T* g = grad_coeff.data<T>();
    for (std::int64_t s = 0; s < sequences; ++s) {
      double assignments = 0;
      for (std::int64_t e = 0; e < experts; ++e)
        assignments += static_cast<double>(c[s * experts + e]);
      const double real_tokens = assignments / top_k;
      if (real_tokens <= 0) {
        for (std::int64_t e = 0; e < experts; ++e) g[s * experts + e] = T(0);
        continue;
      }
      // L_s = E / (k n²) Σ_e c_e P_e ; ∂/∂p = coef / N · E / (k n²) · c_e
      const double factor = coef / static_cast<double>(num_sequences_global) *
                            static_cast<double>(experts) / (top_k * real_tokens * real_tokens);
      double dot = 0;
      for (std::int64_t e = 0; e < experts; ++e) {
        dot += static_cast<double>(c[s * experts + e]) * static_cast<double>(ps[s * experts + e]);
        g[s * experts + e] = static_cast<T>(factor * static_cast<double>(c[s * experts + e]));
      }
      loss += factor * dot;
    }
  });
  return loss;
}

void moe_aux_loss_backward(const OpContext& ctx, const Tensor& probs, const Tensor& seq_cu_seqlens,
                           const Tensor& token_is_real, const Tensor& grad_coeff,
                           const Tensor& dlogits, double loss_scale) {
  constexpr std::string_view op = "moe_aux_loss_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"probs", &probs}, {"grad_coeff", &grad_coeff}, {"dlogits", &dlogits}});
  detail::require_device(op, ctx, "token_is_real", token_is_real);
  detail::require_rank(op, "probs", probs, 2);
  const std::int64_t tokens = probs.size(0), experts = probs.size(1);
  check_sequences(op, seq_cu_seqlens, token_is_real, tokens);
  const std::int64_t sequences = seq_cu_seqlens.size(0) - 1;
  detail::require_shape(op, "grad_coeff", grad_coeff, Shape{sequences, experts});
  detail::require_shape(op, "dlogits", dlogits, probs.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).moe_aux_loss_backward(ctx, probs, seq_cu_seqlens, token_is_real,
                                                        grad_coeff, dlogits, loss_scale);
  detail::dispatch_float(op, probs.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = probs.data<T>();
    const T* g = grad_coeff.data<T>();
    const std::int32_t* cu = seq_cu_seqlens.data<std::int32_t>();
    const std::uint8_t* real =
        token_is_real.defined() ? token_is_real.data<std::uint8_t>() : nullptr;
    T* dl = dlogits.data<T>();
    const T factor = static_cast<T>(loss_scale);
    for (std::int64_t s = 0; s < sequences; ++s) {
      const T* gs = g + s * experts;
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        if (real != nullptr && real[t] == 0) continue;
        const T* pt = p + t * experts;
        T dot = 0;
        for (std::int64_t e = 0; e < experts; ++e) dot += pt[e] * gs[e];
        for (std::int64_t e = 0; e < experts; ++e)
          dl[t * experts + e] += factor * pt[e] * (gs[e] - dot);
      }
    }
  });
}

}  // namespace dyncp::ops
