// Fused chunked LM head + cross-entropy on CPU (formulas in cross_entropy.hpp).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/bf16_operands.hpp"
#include "ops/blas.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/cross_entropy_chunks.hpp"
#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops {
namespace {

struct Problem {
  std::int64_t tokens, hidden, vocab;
  bool with_grad;
  // bf16 products: hidden and W_lm arrive rounded; dlogits are rounded to bf16 before the two
  // backward products (as the CUDA kernel's bf16 path does); logits and the loss stay fp32.
  bool bf16_products = false;
};

// The counted rows, `token_chunk` at a time (detail::CountedRows), through the vocab chunks.
template <typename T>
CrossEntropyResult run(const Problem& pb, const Tensor& hidden_t, const Tensor& weight_t,
                       const Tensor& labels_t, const Tensor& mask_t, const Tensor& loss_t,
                       const Tensor& dhidden_t, const Tensor& dweight_t,
                       const CrossEntropyOptions& options, core::Arena& scratch) {
  const std::int64_t token_chunk =
      std::min(options.token_chunk, std::max<std::int64_t>(pb.tokens, 1));
  const std::int64_t vocab_chunk = std::min(options.vocab_chunk, pb.vocab);
  const bool single_pass = vocab_chunk == pb.vocab;
  const T grad_scale = static_cast<T>(options.grad_scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t hd = pb.hidden;

  core::ArenaScope scope(scratch);
  const auto dtype = core::dtype_of<T>::value;
  T* tile = scratch.allocate(Shape{token_chunk, vocab_chunk}, dtype).template data<T>();
  T* h_rows = scratch.allocate(Shape{token_chunk, hd}, dtype).template data<T>();
  T* dh_rows =
      pb.with_grad ? scratch.allocate(Shape{token_chunk, hd}, dtype).template data<T>() : nullptr;
  T* row_max = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  T* row_sum = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  T* target = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  T* row_lse = scratch.allocate(Shape{token_chunk}, dtype).template data<T>();
  auto* row_token = scratch.allocate(Shape{token_chunk}, DType::i64).template data<std::int64_t>();

  const T* w = weight_t.data<T>();
  const std::int32_t* labels = labels_t.data<std::int32_t>();
  T* per_token = loss_t.defined() ? loss_t.data<T>() : nullptr;
  T* dh = pb.with_grad ? dhidden_t.data<T>() : nullptr;
  T* dw = pb.with_grad ? dweight_t.data<T>() : nullptr;
  if (per_token != nullptr) std::fill(per_token, per_token + pb.tokens, T(0));
  if (dh != nullptr) std::fill(dh, dh + pb.tokens * hd, T(0));

  CrossEntropyResult result;
  detail::CountedRows<T> counted(hidden_t, labels_t, mask_t);
  while (const std::int64_t nt = counted.next(token_chunk, row_token, h_rows)) {
    std::fill(row_max, row_max + nt, neg_inf);
    std::fill(row_sum, row_sum + nt, T(0));
    std::fill(target, target + nt, T(0));
    // Pass 1: online log-sum-exp over vocab chunks, and the label's logit.
    for (std::int64_t v0 = 0; v0 < pb.vocab; v0 += vocab_chunk) {
      const std::int64_t nv = std::min(vocab_chunk, pb.vocab - v0);
      detail::blas_gemm<T>(false, true, nt, nv, hd, T(1), h_rows, hd, w + v0 * hd, hd, T(0), tile,
                           nv);
      // In place: the tile now holds exp(logit − max); single-pass mode reuses it below.
      detail::fold_logits_tile(tile, nt, nv, v0, labels, row_token, 0, row_max, row_sum, target);
    }
    for (std::int64_t i = 0; i < nt; ++i) {
      row_lse[i] = row_max[i] + std::log(row_sum[i]);
      const T loss = row_lse[i] - target[i];
      if (per_token != nullptr) per_token[row_token[i]] = loss;
      result.loss_sum += static_cast<double>(loss);
      ++result.num_loss_tokens;
    }
    if (!pb.with_grad) continue;
    // Pass 2: dlogits per tile (recomputed unless the whole vocabulary fit in one tile).
    for (std::int64_t v0 = 0; v0 < pb.vocab; v0 += vocab_chunk) {
      const std::int64_t nv = std::min(vocab_chunk, pb.vocab - v0);
      if (!single_pass) {
        detail::blas_gemm<T>(false, true, nt, nv, hd, T(1), h_rows, hd, w + v0 * hd, hd, T(0), tile,
                             nv);
      }
      for (std::int64_t i = 0; i < nt; ++i) {
        T* row = tile + i * nv;
        if (single_pass) {
          // The tile holds exp(logit − max) from pass 1: softmax = that / sum.
          const T factor = grad_scale / row_sum[i];
          for (std::int64_t j = 0; j < nv; ++j) row[j] *= factor;
        } else {
          detail::exp_shifted(row, nv, row_lse[i]);
          for (std::int64_t j = 0; j < nv; ++j) row[j] *= grad_scale;
        }
        const std::int64_t label = labels[row_token[i]];
        if (label >= v0 && label < v0 + nv) row[label - v0] -= grad_scale;
      }
      detail::backpropagate_logits_tile(tile, nt, nv, hd, w + v0 * hd, h_rows, v0 == 0,
                                        pb.bf16_products, dh_rows, dw + v0 * hd);
    }
    detail::scatter_rows(dh_rows, nt, hd, row_token, dh);
  }
  return result;
}

}  // namespace

CrossEntropyResult fused_cross_entropy(const OpContext& ctx, const Tensor& hidden,
                                       const Tensor& lm_weight, const Tensor& labels,
                                       const Tensor& loss_mask, const Tensor& per_token_loss,
                                       const Tensor& dhidden, const Tensor& dlm_weight,
                                       const CrossEntropyOptions& options) {
  constexpr std::string_view op = "fused_cross_entropy";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"hidden", &hidden},
                                                {"lm_weight", &lm_weight},
                                                {"per_token_loss", &per_token_loss},
                                                {"dhidden", &dhidden},
                                                {"dlm_weight", &dlm_weight}});
  detail::require_rank(op, "hidden", hidden, 2);
  detail::require_rank(op, "lm_weight", lm_weight, 2);
  const Problem pb{hidden.size(0), hidden.size(1), lm_weight.size(0),
                   dhidden.defined() || dlm_weight.defined()};
  if (lm_weight.size(1) != pb.hidden) {
    detail::fail(op, "hidden " + hidden.describe() + " and lm_weight " + lm_weight.describe() +
                         " disagree on the hidden size");
  }
  if (pb.vocab == 0) detail::fail(op, "lm_weight has an empty vocabulary");
  if (pb.with_grad) {
    detail::require_shape(op, "dhidden", dhidden, hidden.shape());
    detail::require_shape(op, "dlm_weight", dlm_weight, lm_weight.shape());
  }
  detail::require_dtype(op, "labels", labels, DType::i32);
  detail::require_shape(op, "labels", labels, Shape{pb.tokens});
  if (loss_mask.defined()) {
    detail::require_dtype(op, "loss_mask", loss_mask, DType::u8);
    detail::require_shape(op, "loss_mask", loss_mask, Shape{pb.tokens});
  }
  if (per_token_loss.defined())
    detail::require_shape(op, "per_token_loss", per_token_loss, Shape{pb.tokens});
  if (options.token_chunk < 1 || options.vocab_chunk < 1) {
    detail::fail(op, "token_chunk and vocab_chunk must be >= 1");
  }
  detail::require_device(op, ctx, "labels", labels);
  detail::require_device(op, ctx, "loss_mask", loss_mask);
  if (ctx.device == Device::cuda) {
    // The kernel flags the first label outside the vocabulary; the backend raises it.
    return detail::device_ops(op).fused_cross_entropy(ctx, hidden, lm_weight, labels, loss_mask,
                                                      per_token_loss, dhidden, dlm_weight, options);
  }
  const std::int32_t* label_values = labels.data<std::int32_t>();
  for (std::int64_t t = 0; t < pb.tokens; ++t) {
    if (label_values[t] >= pb.vocab) {
      core::throw_data_error("token " + std::to_string(t), std::string(op) + ": label " +
                                                               std::to_string(label_values[t]) +
                                                               " is outside the vocabulary [0, " +
                                                               std::to_string(pb.vocab) + ")");
    }
  }
  core::Arena& scratch = detail::require_scratch(op, ctx);
  if (detail::bf16_products(op, ctx, hidden)) {
    core::ArenaScope rounded(scratch);
    Problem bf16 = pb;
    bf16.bf16_products = true;
    return run<float>(bf16, detail::bf16_rounded_copy(scratch, hidden),
                      detail::bf16_rounded_copy(scratch, lm_weight), labels, loss_mask,
                      per_token_loss, dhidden, dlm_weight, options, scratch);
  }
  CrossEntropyResult result;
  detail::dispatch_float(op, hidden.dtype(), [&](auto zero) {
    result = run<decltype(zero)>(pb, hidden, lm_weight, labels, loss_mask, per_token_loss, dhidden,
                                 dlm_weight, options, scratch);
  });
  return result;
}

}  // namespace dyncp::ops
