// The vocabulary-parallel LM head + cross-entropy on CPU (formulas in
// vocab_parallel_cross_entropy.hpp). The loops are fused_cross_entropy's (cross_entropy_cpu.cpp)
// cut at the two TP reductions: the same counted-row chunks, the same online log-sum-exp over
// vocab chunks, the same recomputed tiles in the backward, so one shard {0, V} reproduces it.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/bf16_operands.hpp"
#include "ops/blas.hpp"
#include "ops/cross_entropy_chunks.hpp"
#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"
#include "ops/vocab_parallel_cross_entropy.hpp"

namespace dyncp::ops {
namespace {

struct ShardProblem {
  std::int64_t tokens, hidden, rows;  // rows: V_local, the shard's columns of the logits
  std::int64_t first;                 // whole-vocabulary id of local row 0
  std::int64_t token_chunk, vocab_chunk;
  // bf16 products: hidden and W arrive rounded; dlogits are rounded before the backward products.
  bool bf16_products = false;
};

ShardProblem problem_of(const Tensor& hidden, const Tensor& weight, const VocabShardRange& shard,
                        const CrossEntropyOptions& options) {
  const std::int64_t tokens = hidden.size(0), rows = weight.size(0);
  return {tokens,
          hidden.size(1),
          rows,
          shard.first,
          std::min(options.token_chunk, std::max<std::int64_t>(tokens, 1)),
          std::min(options.vocab_chunk, rows)};
}

template <typename T>
void shard_logsumexp(const ShardProblem& pb, const Tensor& hidden_t, const Tensor& weight_t,
                     const Tensor& labels_t, const Tensor& mask_t, const Tensor& lse_t,
                     const Tensor& target_t, core::Arena& scratch) {
  const std::int64_t hd = pb.hidden, token_chunk = pb.token_chunk, vocab_chunk = pb.vocab_chunk;
  core::ArenaScope scope(scratch);
  const auto dtype = core::dtype_of<T>::value;
  T* tile = scratch.allocate(Shape{token_chunk, vocab_chunk}, dtype).template data<T>();
  T* h_rows = scratch.allocate(Shape{token_chunk, hd}, dtype).template data<T>();
  T* row_max = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  T* row_sum = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  T* target = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  auto* row_token = scratch.allocate(Shape{token_chunk}, DType::i64).template data<std::int64_t>();

  const T* w = weight_t.data<T>();
  const std::int32_t* labels = labels_t.data<std::int32_t>();
  T* shard_lse = lse_t.data<T>();
  T* target_logit = target_t.data<T>();
  std::fill(shard_lse, shard_lse + pb.tokens, T(0));
  std::fill(target_logit, target_logit + pb.tokens, T(0));
  detail::CountedRows<T> counted(hidden_t, labels_t, mask_t);
  while (const std::int64_t nt = counted.next(token_chunk, row_token, h_rows)) {
    std::fill(row_max, row_max + nt, -std::numeric_limits<T>::infinity());
    std::fill(row_sum, row_sum + nt, T(0));
    std::fill(target, target + nt, T(0));
    // Online log-sum-exp over the shard's vocab chunks, and the label's logit if it is here.
    for (std::int64_t v0 = 0; v0 < pb.rows; v0 += vocab_chunk) {
      const std::int64_t nv = std::min(vocab_chunk, pb.rows - v0);
      detail::blas_gemm<T>(false, true, nt, nv, hd, T(1), h_rows, hd, w + v0 * hd, hd, T(0), tile,
                           nv);
      detail::fold_logits_tile(tile, nt, nv, v0, labels, row_token, pb.first, row_max, row_sum,
                               target);
    }
    for (std::int64_t i = 0; i < nt; ++i) {
      shard_lse[row_token[i]] = row_max[i] + std::log(row_sum[i]);
      target_logit[row_token[i]] = target[i];
    }
  }
}

// loss_t = lse_t − target_t on counted rows, summed in token order (needs no product).
template <typename T>
CrossEntropyResult shard_loss(const Tensor& labels_t, const Tensor& mask_t, const Tensor& lse_t,
                              const Tensor& target_t, const Tensor& loss_t) {
  const std::int32_t* labels = labels_t.data<std::int32_t>();
  const std::uint8_t* mask = mask_t.defined() ? mask_t.data<std::uint8_t>() : nullptr;
  const T* lse = lse_t.data<T>();
  const T* target = target_t.data<T>();
  T* per_token = loss_t.defined() ? loss_t.data<T>() : nullptr;
  CrossEntropyResult result;
  for (std::int64_t t = 0; t < labels_t.size(0); ++t) {
    const bool counted = labels[t] >= 0 && (mask == nullptr || mask[t] != 0);
    const T loss = counted ? lse[t] - target[t] : T(0);
    if (per_token != nullptr) per_token[t] = loss;
    if (!counted) continue;
    result.loss_sum += static_cast<double>(loss);
    ++result.num_loss_tokens;
  }
  return result;
}

// dlogits per recomputed tile; dhidden rows (=, then += over vocab chunks) scattered to dhidden,
// dW_shard += dlogitsᵀ · hidden rows.
template <typename T>
void shard_gradients(const ShardProblem& pb, const Tensor& hidden_t, const Tensor& weight_t,
                     const Tensor& labels_t, const Tensor& mask_t, const Tensor& lse_t,
                     const Tensor& dhidden_t, const Tensor& dweight_t, double grad_scale_value,
                     core::Arena& scratch) {
  const std::int64_t hd = pb.hidden, token_chunk = pb.token_chunk, vocab_chunk = pb.vocab_chunk;
  core::ArenaScope scope(scratch);
  const auto dtype = core::dtype_of<T>::value;
  T* tile = scratch.allocate(Shape{token_chunk, vocab_chunk}, dtype).template data<T>();
  T* h_rows = scratch.allocate(Shape{token_chunk, hd}, dtype).template data<T>();
  T* dh_rows = scratch.allocate(Shape{token_chunk, hd}, dtype).template data<T>();
  auto* row_token = scratch.allocate(Shape{token_chunk}, DType::i64).template data<std::int64_t>();

  const T grad_scale = static_cast<T>(grad_scale_value);
  const T* w = weight_t.data<T>();
  const std::int32_t* labels = labels_t.data<std::int32_t>();
  const T* lse = lse_t.data<T>();
  T* dh = dhidden_t.data<T>();
  T* dw = dweight_t.data<T>();
  std::fill(dh, dh + pb.tokens * hd, T(0));
  detail::CountedRows<T> counted(hidden_t, labels_t, mask_t);
  while (const std::int64_t nt = counted.next(token_chunk, row_token, h_rows)) {
    for (std::int64_t v0 = 0; v0 < pb.rows; v0 += vocab_chunk) {
      const std::int64_t nv = std::min(vocab_chunk, pb.rows - v0);
      detail::blas_gemm<T>(false, true, nt, nv, hd, T(1), h_rows, hd, w + v0 * hd, hd, T(0), tile,
                           nv);
      for (std::int64_t i = 0; i < nt; ++i) {
        T* row = tile + i * nv;
        detail::exp_shifted(row, nv, lse[row_token[i]]);
        for (std::int64_t j = 0; j < nv; ++j) row[j] *= grad_scale;
        const std::int64_t local = labels[row_token[i]] - pb.first;
        if (local >= v0 && local < v0 + nv) row[local - v0] -= grad_scale;
      }
      detail::backpropagate_logits_tile(tile, nt, nv, hd, w + v0 * hd, h_rows, v0 == 0,
                                        pb.bf16_products, dh_rows, dw + v0 * hd);
    }
    detail::scatter_rows(dh_rows, nt, hd, row_token, dh);
  }
}

// The checks steps 1 and 3 share: the operands, the labels and the shard. Returns the problem.
ShardProblem check_shard_operands(std::string_view op, const OpContext& ctx, const Tensor& hidden,
                                  const Tensor& weight, const VocabShardRange& shard,
                                  const Tensor& labels, const Tensor& loss_mask,
                                  const CrossEntropyOptions& options) {
  detail::require_rank(op, "hidden", hidden, 2);
  detail::require_rank(op, "lm_weight_shard", weight, 2);
  if (weight.size(1) != hidden.size(1)) {
    detail::fail(op, "hidden " + hidden.describe() + " and lm_weight_shard " + weight.describe() +
                         " disagree on the hidden size");
  }
  detail::require_vocab_shard(op, shard, weight.size(0));
  detail::require_dtype(op, "labels", labels, DType::i32);
  detail::require_shape(op, "labels", labels, Shape{hidden.size(0)});
  detail::require_device(op, ctx, "labels", labels);
  if (loss_mask.defined()) {
    detail::require_dtype(op, "loss_mask", loss_mask, DType::u8);
    detail::require_shape(op, "loss_mask", loss_mask, Shape{hidden.size(0)});
    detail::require_device(op, ctx, "loss_mask", loss_mask);
  }
  if (options.token_chunk < 1 || options.vocab_chunk < 1) {
    detail::fail(op, "token_chunk and vocab_chunk must be >= 1");
  }
  return problem_of(hidden, weight, shard, options);
}

// Every label, counted or not, below the whole vocabulary (CPU; the kernels flag it on CUDA).
void require_labels_in_vocabulary(std::string_view op, const Tensor& labels,
                                  std::int64_t vocab_size) {
  const std::int32_t* values = labels.data<std::int32_t>();
  for (std::int64_t t = 0; t < labels.size(0); ++t) {
    if (values[t] >= vocab_size) {
      core::throw_data_error("token " + std::to_string(t), std::string(op) + ": label " +
                                                               std::to_string(values[t]) +
                                                               " is outside the vocabulary [0, " +
                                                               std::to_string(vocab_size) + ")");
    }
  }
}

}  // namespace

void vocab_shard_logsumexp(const OpContext& ctx, const Tensor& hidden,
                           const Tensor& lm_weight_shard, const VocabShardRange& shard,
                           const Tensor& labels, const Tensor& loss_mask, const Tensor& shard_lse,
                           const Tensor& target_logit, const CrossEntropyOptions& options) {
  constexpr std::string_view op = "vocab_shard_logsumexp";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"hidden", &hidden},
                                                {"lm_weight_shard", &lm_weight_shard},
                                                {"shard_lse", &shard_lse},
                                                {"target_logit", &target_logit}});
  ShardProblem pb =
      check_shard_operands(op, ctx, hidden, lm_weight_shard, shard, labels, loss_mask, options);
  detail::require_shape(op, "shard_lse", shard_lse, Shape{pb.tokens});
  detail::require_shape(op, "target_logit", target_logit, Shape{pb.tokens});
  if (ctx.device == Device::cuda) {
    return detail::device_ops(op).vocab_shard_logsumexp(
        ctx, hidden, lm_weight_shard, shard, labels, loss_mask, shard_lse, target_logit, options);
  }
  require_labels_in_vocabulary(op, labels, shard.vocab_size);
  core::Arena& scratch = detail::require_scratch(op, ctx);
  if (detail::bf16_products(op, ctx, hidden)) {
    core::ArenaScope rounded(scratch);
    pb.bf16_products = true;
    return shard_logsumexp<float>(pb, detail::bf16_rounded_copy(scratch, hidden),
                                  detail::bf16_rounded_copy(scratch, lm_weight_shard), labels,
                                  loss_mask, shard_lse, target_logit, scratch);
  }
  detail::dispatch_float(op, hidden.dtype(), [&](auto zero) {
    shard_logsumexp<decltype(zero)>(pb, hidden, lm_weight_shard, labels, loss_mask, shard_lse,
                                    target_logit, scratch);
  });
}

void combine_shard_logsumexp(const OpContext& ctx, const Tensor& shard_lses, const Tensor& lse) {
  constexpr std::string_view op = "combine_shard_logsumexp";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"shard_lses", &shard_lses}, {"lse", &lse}});
  detail::require_rank(op, "shard_lses", shard_lses, 2);
  if (shard_lses.size(0) < 1)
    detail::fail(op, "shard_lses " + shard_lses.describe() + " has no shard");
  detail::require_shape(op, "lse", lse, Shape{shard_lses.size(1)});
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).combine_shard_logsumexp(ctx, shard_lses, lse);
  const std::int64_t shards = shard_lses.size(0), tokens = shard_lses.size(1);
  detail::dispatch_float(op, lse.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* parts = shard_lses.data<T>();
    T* out = lse.data<T>();
    for (std::int64_t t = 0; t < tokens; ++t) {
      T m = -std::numeric_limits<T>::infinity();
      for (std::int64_t s = 0; s < shards; ++s) m = std::max(m, parts[s * tokens + t]);
      if (m == -std::numeric_limits<T>::infinity()) {
        out[t] = m;
        continue;
      }
      T sum = 0;
      for (std::int64_t s = 0; s < shards; ++s) sum += std::exp(parts[s * tokens + t] - m);
      out[t] = m + std::log(sum);
    }
  });
}

CrossEntropyResult vocab_shard_cross_entropy(
    const OpContext& ctx, const Tensor& hidden, const Tensor& lm_weight_shard,
    const VocabShardRange& shard, const Tensor& labels, const Tensor& loss_mask, const Tensor& lse,
    const Tensor& target_logit, const Tensor& per_token_loss, const Tensor& dhidden,
    const Tensor& dlm_weight, const CrossEntropyOptions& options) {
  constexpr std::string_view op = "vocab_shard_cross_entropy";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"hidden", &hidden},
                                                {"lm_weight_shard", &lm_weight_shard},
                                                {"lse", &lse},
                                                {"target_logit", &target_logit},
                                                {"per_token_loss", &per_token_loss},
                                                {"dhidden", &dhidden},
                                                {"dlm_weight", &dlm_weight}});
  ShardProblem pb =
      check_shard_operands(op, ctx, hidden, lm_weight_shard, shard, labels, loss_mask, options);
  detail::require_shape(op, "lse", lse, Shape{pb.tokens});
  detail::require_shape(op, "target_logit", target_logit, Shape{pb.tokens});
  if (per_token_loss.defined())
    detail::require_shape(op, "per_token_loss", per_token_loss, Shape{pb.tokens});
  const bool with_grad = dhidden.defined() || dlm_weight.defined();
  if (with_grad) {
    detail::require_shape(op, "dhidden", dhidden, hidden.shape());
    detail::require_shape(op, "dlm_weight", dlm_weight, lm_weight_shard.shape());
  }
  if (ctx.device == Device::cuda) {
    return detail::device_ops(op).vocab_shard_cross_entropy(
        ctx, hidden, lm_weight_shard, shard, labels, loss_mask, lse, target_logit, per_token_loss,
        dhidden, dlm_weight, options);
  }
  require_labels_in_vocabulary(op, labels, shard.vocab_size);
  CrossEntropyResult result;
  detail::dispatch_float(op, hidden.dtype(), [&](auto zero) {
    result = shard_loss<decltype(zero)>(labels, loss_mask, lse, target_logit, per_token_loss);
  });
  if (!with_grad) return result;
  core::Arena& scratch = detail::require_scratch(op, ctx);
  if (detail::bf16_products(op, ctx, hidden)) {
    core::ArenaScope rounded(scratch);
    pb.bf16_products = true;
    shard_gradients<float>(pb, detail::bf16_rounded_copy(scratch, hidden),
                           detail::bf16_rounded_copy(scratch, lm_weight_shard), labels, loss_mask,
                           lse, dhidden, dlm_weight, options.grad_scale, scratch);
    return result;
  }
  detail::dispatch_float(op, hidden.dtype(), [&](auto zero) {
    shard_gradients<decltype(zero)>(pb, hidden, lm_weight_shard, labels, loss_mask, lse, dhidden,
                                    dlm_weight, options.grad_scale, scratch);
  });
  return result;
}

}  // namespace dyncp::ops
