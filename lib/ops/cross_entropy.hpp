#pragma once
// Fused, chunked LM head + cross-entropy: logits = hidden · W_lmᵀ, log-softmax over the
// vocabulary and the negative log-likelihood of the labels, forward and backward in one call.
// It never materialises [tokens x vocab]: tokens go in chunks of `token_chunk` COUNTED rows
// (rows without loss never enter the vocab products), the vocabulary in chunks of `vocab_chunk`;
// scratch holds one [token_chunk, vocab_chunk] tile and two [token_chunk, h] row buffers. With
// vocab_chunk >= V each token chunk's logits are computed once; otherwise a first pass over the
// vocab chunks gets the log-sum-exp (online) and a second pass recomputes each tile for the
// gradient.
//
//   loss_t = lse_t − logit_{t, label_t},  lse_t = log Σ_v exp(logit_{t,v})
//   loss_sum = Σ_{t: counted} loss_t,  counted = label_t >= 0 and (loss_mask undefined or
//              loss_mask_t != 0)
//   dlogit_{t,v} = grad_scale · (softmax_{t,v} − [v = label_t]) on counted rows, 0 elsewhere
//   dhidden = dlogits · W_lm  (overwrite),  dW_lm += dlogitsᵀ · hidden  (accumulates)
// The returned loss is a SUM (normalisation by the global count of loss tokens happens in the
// trainer, so the layout never enters it); grad_scale is usually 1.
//
// hidden: [T, h]; lm_weight: [V, h]; labels: i32 [T] (a negative label = ignored; a label >= V is
// a data error naming the row); loss_mask: u8 [T] or undefined; per_token_loss: [T] output
// (0 on rows not counted) or undefined. Pass undefined dhidden AND dlm_weight for forward only.
// Needs ctx.scratch. With bf16 products (OpContext::precision) hidden and W_lm are read rounded
// to bf16 (scratch also holds their rounded copies on CPU) and dlogits are rounded to bf16 before
// the two backward products; logits, log-sum-exp and the loss stay fp32.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

// Defaults: one pass over the whole vocabulary (every Qwen vocabulary, up to 248,320, fits one
// tile) for 64 loss rows at a time: a tile of at most 64 x 262,144 floats = 64 MiB of scratch and
// no recomputed logits. Lower vocab_chunk to trade one extra vocab product for memory.
struct CrossEntropyOptions {
  std::int64_t token_chunk = 64;
  std::int64_t vocab_chunk = 262144;
  double grad_scale = 1.0;
};

struct CrossEntropyResult {
  double loss_sum = 0.0;
  std::int64_t num_loss_tokens = 0;
};

CrossEntropyResult fused_cross_entropy(const OpContext& ctx, const Tensor& hidden,
                                       const Tensor& lm_weight, const Tensor& labels,
                                       const Tensor& loss_mask, const Tensor& per_token_loss,
                                       const Tensor& dhidden, const Tensor& dlm_weight,
                                       const CrossEntropyOptions& options = {});

}  // namespace dyncp::ops
