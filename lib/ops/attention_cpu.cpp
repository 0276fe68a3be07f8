// Tiled varlen causal GQA attention on CPU (formulas in attention.hpp).
//
// Loop order: sequence → query head → query tile (kQueryTile rows) → key tile (kKeyTile rows).
// Score tiles live on the stack; the output rows themselves accumulate the unnormalised
// numerator (rescaled when the running max moves), so forward needs no scratch. Tiles whose
// smallest key position exceeds the largest query position are skipped entirely, which is
// what makes causal attention cost about half of the full square.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/attention.hpp"
#include "ops/attention_layout.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/blas.hpp"
#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops {
namespace {

constexpr std::int64_t kQueryTile = 64;
constexpr std::int64_t kKeyTile = 64;

struct Dims {
  std::int64_t q_tokens, kv_tokens, q_heads, kv_heads, head_dim;
  std::int64_t group() const { return q_heads / kv_heads; }
};

Dims check_qkv(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v) {
  detail::require_rank(op, "q", q, 3);
  detail::require_rank(op, "k", k, 3);
  detail::require_shape(op, "v", v, k.shape());
  const Dims dims{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2)};
  if (k.size(2) != dims.head_dim || dims.kv_heads == 0 || dims.q_heads % dims.kv_heads != 0) {
    detail::fail(op, "q " + q.describe() + " and k " + k.describe() +
                         " must share head_dim, with q heads a multiple of kv heads");
  }
  return dims;
}

struct TileBounds {
  std::int32_t min_position = std::numeric_limits<std::int32_t>::max();
  std::int32_t max_position = -1;
};

// Key position kp is hidden from query position qp: in the future, or (sliding window w > 0)
// w or more positions back.
inline bool hidden(std::int32_t kp, std::int32_t qp, std::int32_t window) {
  return kp > qp || (window > 0 && qp - kp >= window);
}

TileBounds bounds(const std::int32_t* positions, std::int64_t begin, std::int64_t count) {
  TileBounds b;
  for (std::int64_t i = 0; i < count; ++i) {
    b.min_position = std::min(b.min_position, positions[begin + i]);
    b.max_position = std::max(b.max_position, positions[begin + i]);
  }
  return b;
}

template <typename T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                  const VarlenAttentionLayout& layout, double scale_d, const Tensor& out,
                  const Tensor& lse_tensor, const Dims& dims) {
  const T scale = static_cast<T>(scale_d);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t hq_count = dims.q_heads, d = dims.head_dim;
  const std::int64_t q_stride = hq_count * d, kv_stride = dims.kv_heads * d;
  const T* qs = q.data<T>();
  const T* ks = k.data<T>();
  const T* vs = v.data<T>();
  T* os = out.data<T>();
  T* lse = lse_tensor.data<T>();
  const std::int32_t* q_cu = layout.q_cu_seqlens.data<std::int32_t>();
  const std::int32_t* kv_cu = layout.kv_cu_seqlens.data<std::int32_t>();
  const std::int32_t* q_pos = layout.q_positions.data<std::int32_t>();
  const std::int32_t* kv_pos = layout.kv_positions.data<std::int32_t>();
  const std::int32_t window = layout.sliding_window;
  const std::int64_t sequences = layout.q_cu_seqlens.size(0) - 1;

  T scores[kQueryTile * kKeyTile];
  T running_max[kQueryTile];
  T running_sum[kQueryTile];

  for (std::int64_t s = 0; s < sequences; ++s) {
    const std::int64_t q_begin = q_cu[s], q_end = q_cu[s + 1];
    const std::int64_t k_begin = kv_cu[s], k_end = kv_cu[s + 1];
    for (std::int64_t hq = 0; hq < hq_count; ++hq) {
      const std::int64_t hk = hq / dims.group();
      for (std::int64_t qt = q_begin; qt < q_end; qt += kQueryTile) {
        const std::int64_t nq = std::min(kQueryTile, q_end - qt);
        const TileBounds qb = bounds(q_pos, qt, nq);
        T* out_tile = os + qt * q_stride + hq * d;
        for (std::int64_t i = 0; i < nq; ++i) {
          running_max[i] = neg_inf;
          running_sum[i] = 0;
          std::fill(out_tile + i * q_stride, out_tile + i * q_stride + d, T(0));
        }
        for (std::int64_t kt = k_begin; kt < k_end; kt += kKeyTile) {
          const std::int64_t nk = std::min(kKeyTile, k_end - kt);
          const TileBounds kb = bounds(kv_pos, kt, nk);
          // Skip a tile whose keys are all in the future of, or a window back from, every query.
          if (kb.min_position > qb.max_position ||
              (window > 0 && qb.min_position - kb.max_position >= window))
            continue;
          const bool unmasked = kb.max_position <= qb.min_position &&
                                (window == 0 || qb.max_position - kb.min_position < window);
          detail::blas_gemm<T>(false, true, nq, nk, d, scale, qs + qt * q_stride + hq * d, q_stride,
                               ks + kt * kv_stride + hk * d, kv_stride, T(0), scores, nk);
          for (std::int64_t i = 0; i < nq; ++i) {
            T* row = scores + i * nk;
            if (!unmasked) {
              const std::int32_t qp = q_pos[qt + i];
              for (std::int64_t j = 0; j < nk; ++j)
                row[j] = hidden(kv_pos[kt + j], qp, window) ? neg_inf : row[j];
            }
            const T tile_max = detail::row_max(row, nk, neg_inf);
            if (tile_max == neg_inf) {
              std::fill(row, row + nk, T(0));
              continue;
            }
            const T new_max = std::max(running_max[i], tile_max);
            const T correction = std::exp(running_max[i] - new_max);  // 0 when max was −inf
            detail::exp_shifted(row, nk, new_max);  // masked keys: exp(−inf) = 0
            running_sum[i] = running_sum[i] * correction + detail::row_sum(row, nk);
            running_max[i] = new_max;
            if (correction != T(1)) {
              T* o = out_tile + i * q_stride;
              for (std::int64_t c = 0; c < d; ++c) o[c] *= correction;
            }
          }
          detail::blas_gemm<T>(false, false, nq, d, nk, T(1), scores, nk,
                               vs + kt * kv_stride + hk * d, kv_stride, T(1), out_tile, q_stride);
        }
        for (std::int64_t i = 0; i < nq; ++i) {
          T* o = out_tile + i * q_stride;
          T& row_lse = lse[(qt + i) * hq_count + hq];
          if (running_sum[i] == T(0)) {
            row_lse = neg_inf;
            std::fill(o, o + d, T(0));
            continue;
          }
          const T inv = T(1) / running_sum[i];
          for (std::int64_t c = 0; c < d; ++c) o[c] *= inv;
          row_lse = running_max[i] + std::log(running_sum[i]);
        }
      }
    }
  }
}

template <typename T>
void backward_impl(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse_tensor, const VarlenAttentionLayout& layout,
                   double scale_d, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const AttentionGradModes& modes, const Dims& dims, core::Arena& scratch) {
  const T scale = static_cast<T>(scale_d);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t hq_count = dims.q_heads, d = dims.head_dim;
  const std::int64_t q_stride = hq_count * d, kv_stride = dims.kv_heads * d;
  const T* qs = q.data<T>();
  const T* ks = k.data<T>();
  const T* vs = v.data<T>();
  const T* dos = dout.data<T>();
  const T* os = out.data<T>();
  const T* lse = lse_tensor.data<T>();
  T* dqs = dq.data<T>();
  T* dks = dk.data<T>();
  T* dvs = dv.data<T>();
  const std::int32_t* q_cu = layout.q_cu_seqlens.data<std::int32_t>();
  const std::int32_t* kv_cu = layout.kv_cu_seqlens.data<std::int32_t>();
  const std::int32_t* q_pos = layout.q_positions.data<std::int32_t>();
  const std::int32_t* kv_pos = layout.kv_positions.data<std::int32_t>();
  const std::int32_t window = layout.sliding_window;
  const std::int64_t sequences = layout.q_cu_seqlens.size(0) - 1;

  if (modes.dq == GradMode::overwrite) dq.fill_zero();
  if (modes.dk == GradMode::overwrite) dk.fill_zero();
  if (modes.dv == GradMode::overwrite) dv.fill_zero();

  // D_i = dout_i · out_i per (query, head).
  core::ArenaScope scope(scratch);
  Tensor delta_tensor = scratch.allocate(Shape{dims.q_tokens, hq_count}, core::dtype_of<T>::value);
  T* delta = delta_tensor.data<T>();
  for (std::int64_t r = 0; r < dims.q_tokens * hq_count; ++r) {
    T sum = 0;
    for (std::int64_t c = 0; c < d; ++c) sum += dos[r * d + c] * os[r * d + c];
    delta[r] = sum;
  }

  T probs[kQueryTile * kKeyTile];
  T dprobs[kQueryTile * kKeyTile];

  for (std::int64_t s = 0; s < sequences; ++s) {
    const std::int64_t q_begin = q_cu[s], q_end = q_cu[s + 1];
    const std::int64_t k_begin = kv_cu[s], k_end = kv_cu[s + 1];
    for (std::int64_t hq = 0; hq < hq_count; ++hq) {
      const std::int64_t hk = hq / dims.group();
      for (std::int64_t qt = q_begin; qt < q_end; qt += kQueryTile) {
        const std::int64_t nq = std::min(kQueryTile, q_end - qt);
        const TileBounds qb = bounds(q_pos, qt, nq);
        const T* q_tile = qs + qt * q_stride + hq * d;
        const T* do_tile = dos + qt * q_stride + hq * d;
        for (std::int64_t kt = k_begin; kt < k_end; kt += kKeyTile) {
          const std::int64_t nk = std::min(kKeyTile, k_end - kt);
          const TileBounds kb = bounds(kv_pos, kt, nk);
          // Skip a tile whose keys are all in the future of, or a window back from, every query.
          if (kb.min_position > qb.max_position ||
              (window > 0 && qb.min_position - kb.max_position >= window))
            continue;
          const bool unmasked = kb.max_position <= qb.min_position &&
                                (window == 0 || qb.max_position - kb.min_position < window);
          const T* k_tile = ks + kt * kv_stride + hk * d;
          const T* v_tile = vs + kt * kv_stride + hk * d;
          // P = exp(scale · Q Kᵀ − lse), masked.
          detail::blas_gemm<T>(false, true, nq, nk, d, scale, q_tile, q_stride, k_tile, kv_stride,
                               T(0), probs, nk);
          for (std::int64_t i = 0; i < nq; ++i) {
            T* row = probs + i * nk;
            const T row_lse = lse[(qt + i) * hq_count + hq];
            if (row_lse == neg_inf) {
              std::fill(row, row + nk, T(0));
              continue;
            }
            detail::exp_shifted(row, nk, row_lse);
            if (!unmasked) {
              const std::int32_t qp = q_pos[qt + i];
              for (std::int64_t j = 0; j < nk; ++j)
                row[j] = hidden(kv_pos[kt + j], qp, window) ? T(0) : row[j];
            }
          }
          // dV += Pᵀ dO
          detail::blas_gemm<T>(true, false, nk, d, nq, T(1), probs, nk, do_tile, q_stride, T(1),
                               dvs + kt * kv_stride + hk * d, kv_stride);
          // dP = dO Vᵀ;  dS = P ⊙ (dP − D)
          detail::blas_gemm<T>(false, true, nq, nk, d, T(1), do_tile, q_stride, v_tile, kv_stride,
                               T(0), dprobs, nk);
          for (std::int64_t i = 0; i < nq; ++i) {
            const T row_delta = delta[(qt + i) * hq_count + hq];
            for (std::int64_t j = 0; j < nk; ++j) {
              dprobs[i * nk + j] = probs[i * nk + j] * (dprobs[i * nk + j] - row_delta);
            }
          }
          // dQ += scale dS K;  dK += scale dSᵀ Q
          detail::blas_gemm<T>(false, false, nq, d, nk, scale, dprobs, nk, k_tile, kv_stride, T(1),
                               dqs + qt * q_stride + hq * d, q_stride);
          detail::blas_gemm<T>(true, false, nk, d, nq, scale, dprobs, nk, q_tile, q_stride, T(1),
                               dks + kt * kv_stride + hk * d, kv_stride);
        }
      }
    }
  }
}

template <typename T>
void reference_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                    const VarlenAttentionLayout& layout, double scale_d, const Tensor& out,
                    const Tensor& lse_tensor, const Dims& dims) {
  const T scale = static_cast<T>(scale_d);
  const std::int64_t d = dims.head_dim;
  const std::int32_t* q_cu = layout.q_cu_seqlens.data<std::int32_t>();
  const std::int32_t* kv_cu = layout.kv_cu_seqlens.data<std::int32_t>();
  const std::int32_t* q_pos = layout.q_positions.data<std::int32_t>();
  const std::int32_t* kv_pos = layout.kv_positions.data<std::int32_t>();
  const std::int32_t window = layout.sliding_window;
  const T* qs = q.data<T>();
  const T* ks = k.data<T>();
  const T* vs = v.data<T>();
  T* os = out.data<T>();
  T* lse = lse_tensor.data<T>();
  for (std::int64_t s = 0; s + 1 < layout.q_cu_seqlens.size(0); ++s) {
    for (std::int64_t i = q_cu[s]; i < q_cu[s + 1]; ++i) {
      for (std::int64_t hq = 0; hq < dims.q_heads; ++hq) {
        const std::int64_t hk = hq / dims.group();
        const T* qi = qs + (i * dims.q_heads + hq) * d;
        auto score = [&](std::int64_t j) {
          const T* kj = ks + (j * dims.kv_heads + hk) * d;
          T dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
          return dot * scale;
        };
        T max_score = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = kv_cu[s]; j < kv_cu[s + 1]; ++j) {
          if (!hidden(kv_pos[j], q_pos[i], window)) max_score = std::max(max_score, score(j));
        }
        T* oi = os + (i * dims.q_heads + hq) * d;
        std::fill(oi, oi + d, T(0));
        if (max_score == -std::numeric_limits<T>::infinity()) {
          lse[i * dims.q_heads + hq] = max_score;
          continue;
        }
        T sum = 0;
        for (std::int64_t j = kv_cu[s]; j < kv_cu[s + 1]; ++j) {
          if (hidden(kv_pos[j], q_pos[i], window)) continue;
          const T p = std::exp(score(j) - max_score);
          sum += p;
          const T* vj = vs + (j * dims.kv_heads + hk) * d;
          for (std::int64_t c = 0; c < d; ++c) oi[c] += p * vj[c];
        }
        for (std::int64_t c = 0; c < d; ++c) oi[c] /= sum;
        lse[i * dims.q_heads + hq] = max_score + std::log(sum);
      }
    }
  }
}

}  // namespace

void attention_forward(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                       const VarlenAttentionLayout& layout, double scale, const Tensor& out,
                       AttentionSaved& saved) {
  constexpr std::string_view op = "attention_forward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"saved.lse", &saved.lse}});
  const Dims dims = check_qkv(op, q, k, v);
  detail::require_shape(op, "out", out, q.shape());
  detail::require_shape(op, "saved.lse", saved.lse, Shape{dims.q_tokens, dims.q_heads});
  detail::check_attention_layout(op, layout, dims.q_tokens, dims.kv_tokens);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).attention_forward(ctx, q, k, v, layout, scale, out, saved);
  if (detail::bf16_products(op, ctx, q)) {
    // bf16 q, k, v; scores, softmax statistics and out in fp32.
    core::Arena& scratch = detail::require_scratch(op, ctx);
    core::ArenaScope rounded(scratch);
    return attention_forward(detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, q),
                             detail::bf16_rounded_copy(scratch, k),
                             detail::bf16_rounded_copy(scratch, v), layout, scale, out, saved);
  }
  detail::dispatch_float(op, q.dtype(), [&](auto zero) {
    forward_impl<decltype(zero)>(q, k, v, layout, scale, out, saved.lse, dims);
  });
}

void attention_backward(const OpContext& ctx, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const AttentionSaved& saved,
                        const VarlenAttentionLayout& layout, double scale, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, AttentionGradModes modes) {
  constexpr std::string_view op = "attention_backward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"dout", &dout},
                                                {"q", &q},
                                                {"k", &k},
                                                {"v", &v},
                                                {"out", &out},
                                                {"saved.lse", &saved.lse},
                                                {"dq", &dq},
                                                {"dk", &dk},
                                                {"dv", &dv}});
  const Dims dims = check_qkv(op, q, k, v);
  detail::require_shape(op, "dout", dout, q.shape());
  detail::require_shape(op, "out", out, q.shape());
  detail::require_shape(op, "dq", dq, q.shape());
  detail::require_shape(op, "dk", dk, k.shape());
  detail::require_shape(op, "dv", dv, v.shape());
  detail::require_shape(op, "saved.lse", saved.lse, Shape{dims.q_tokens, dims.q_heads});
  detail::check_attention_layout(op, layout, dims.q_tokens, dims.kv_tokens);
  core::Arena& scratch = detail::require_scratch(op, ctx);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).attention_backward(ctx, dout, q, k, v, out, saved, layout, scale,
                                                     dq, dk, dv, modes);
  if (detail::bf16_products(op, ctx, q)) {
    // bf16 dout, q, k, v (as the forward read them); out, lse and the gradients in fp32.
    core::ArenaScope rounded(scratch);
    return attention_backward(
        detail::with_fp32_products(ctx), detail::bf16_rounded_copy(scratch, dout),
        detail::bf16_rounded_copy(scratch, q), detail::bf16_rounded_copy(scratch, k),
        detail::bf16_rounded_copy(scratch, v), out, saved, layout, scale, dq, dk, dv, modes);
  }
  detail::dispatch_float(op, q.dtype(), [&](auto zero) {
    backward_impl<decltype(zero)>(dout, q, k, v, out, saved.lse, layout, scale, dq, dk, dv, modes,
                                  dims, scratch);
  });
}

void attention_merge(const OpContext& ctx, const Tensor& out_acc, const Tensor& lse_acc,
                     const Tensor& out_part, const Tensor& lse_part) {
  constexpr std::string_view op = "attention_merge";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"out_acc", &out_acc},
                                                {"lse_acc", &lse_acc},
                                                {"out_part", &out_part},
                                                {"lse_part", &lse_part}});
  detail::require_rank(op, "out_acc", out_acc, 3);
  detail::require_shape(op, "out_part", out_part, out_acc.shape());
  detail::require_shape(op, "lse_acc", lse_acc, Shape{out_acc.size(0), out_acc.size(1)});
  detail::require_shape(op, "lse_part", lse_part, lse_acc.shape());
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).attention_merge(ctx, out_acc, lse_acc, out_part, lse_part);
  detail::dispatch_float(op, out_acc.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const std::int64_t rows = lse_acc.numel(), d = out_acc.size(2);
    T* acc = out_acc.data<T>();
    T* acc_lse = lse_acc.data<T>();
    const T* part = out_part.data<T>();
    const T* part_lse = lse_part.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T a = acc_lse[r], b = part_lse[r];
      if (b == neg_inf) continue;
      if (a == neg_inf) {
        std::copy(part + r * d, part + (r + 1) * d, acc + r * d);
        acc_lse[r] = b;
        continue;
      }
      const T merged = std::max(a, b) + std::log1p(std::exp(-std::abs(a - b)));
      const T wa = std::exp(a - merged), wb = std::exp(b - merged);
      for (std::int64_t c = 0; c < d; ++c)
        acc[r * d + c] = wa * acc[r * d + c] + wb * part[r * d + c];
      acc_lse[r] = merged;
    }
  });
}

void attention_forward_reference(const OpContext& ctx, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const VarlenAttentionLayout& layout, double scale,
                                 const Tensor& out, const Tensor& lse) {
  constexpr std::string_view op = "attention_forward_reference";
  detail::require_float_operands(op, ctx,
                                 {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}});
  const Dims dims = check_qkv(op, q, k, v);
  detail::require_shape(op, "out", out, q.shape());
  detail::require_shape(op, "lse", lse, Shape{dims.q_tokens, dims.q_heads});
  detail::check_attention_layout(op, layout, dims.q_tokens, dims.kv_tokens);
  detail::dispatch_float(op, q.dtype(), [&](auto zero) {
    reference_impl<decltype(zero)>(q, k, v, layout, scale, out, lse, dims);
  });
}

}  // namespace dyncp::ops
