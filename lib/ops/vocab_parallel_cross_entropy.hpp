#pragma once
// The LM head + cross-entropy over a vocabulary-parallel LM head: each tensor-parallel rank holds
// rows [first, first + V_local) of W_lm (ops/vocab_shard.hpp) and computes only its shard's
// logits, chunked as fused_cross_entropy (ops/cross_entropy.hpp) never materialising
// [T x V_local]. The ops know no communicator; the caller runs the three steps with two TP
// collectives between them:
//
//   1. vocab_shard_logsumexp        per counted row t, over this shard's columns v:
//        shard_lse[t]    = log Σ_{v in shard} exp(logit_tv),   logit = hidden · W_shardᵀ
//        target_logit[t] = logit_{t, label_t} when label_t is in the shard, else 0
//   -> all-gather shard_lse over TP into [S, T] (rank order), all-reduce-sum target_logit over TP
//      (exact: exactly one shard holds each label, the others add zeros)
//   2. combine_shard_logsumexp      lse[t] = log Σ_s exp(shard_lses[s, t])   (s in rank order)
//   3. vocab_shard_cross_entropy    loss_t = lse_t − target_t, the gradient of this shard:
//        dlogit_tv = grad_scale · (exp(logit_tv − lse_t) − [v = label_t])
//        dhidden = dlogits · W_shard (OVERWRITE; the caller all-reduce-sums it over TP)
//        dW_shard += dlogitsᵀ · hidden (accumulates: the shard's rows of the whole dW_lm)
//   -> loss sum and count are the same on every shard (lse and target are); count them once.
//
// With one shard {0, V} the three steps give fused_cross_entropy's results on the CPU bit for
// bit: the loss always, dhidden and dW when it too recomputes its tiles (vocab_chunk < V; with
// one tile it reuses the exponentials, equal to fp32 round-off); with S shards
// the sum of the shards' dhidden and the concatenation of their dW give the whole-vocabulary
// result (tests/ops/vocab_parallel_cross_entropy_test.cpp). Gathering the S log-sum-exps
// (rather than Megatron's max then sum of exp) costs one collective of S·T floats instead of two
// of T, and leaves nothing to recompute between the reductions.
//
// Counted rows: label_t >= 0 and (loss_mask undefined or loss_mask_t != 0); rows not counted
// never enter the vocab products. Labels are whole-vocabulary ids; a label >= shard.vocab_size
// is a data error naming the token (every shard refuses it, as fused_cross_entropy does).
// hidden: [T, h]; lm_weight_shard: [V_local, h]; labels: i32 [T]; loss_mask: u8 [T] or
// undefined; shard_lse, target_logit, lse, per_token_loss: [T] and shard_lses [S, T], all of
// hidden's dtype (f32; f64 on the CPU for the finite-difference tests) and device.
// Needs ctx.scratch (tiles of token_chunk x vocab_chunk; the bf16 copies under bf16 products).
// bf16 products (OpContext::precision): hidden and W read bf16-rounded, logits and the lse fp32,
// dlogits rounded to bf16 before the two backward products, as fused_cross_entropy.
// On CUDA: the counted rows are listed on the device and their count read back with the bad-label
// flag (one copy per call of step 1 and 3); step 2 and the gradient chunks never synchronise.

#include <cstdint>

#include "ops/context.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/vocab_shard.hpp"

namespace dyncp::ops {

// Step 1. Rows not counted get 0 in both outputs. options.grad_scale is unused here.
void vocab_shard_logsumexp(const OpContext& ctx, const Tensor& hidden,
                           const Tensor& lm_weight_shard, const VocabShardRange& shard,
                           const Tensor& labels, const Tensor& loss_mask, const Tensor& shard_lse,
                           const Tensor& target_logit, const CrossEntropyOptions& options = {});

// Step 2. shard_lses: [S, T] (S >= 1: the TP ranks' step-1 results in rank order); lse: [T].
// Per token m = max_s, lse = m + log Σ_s exp(l_s − m), summed in s order, so every rank holding
// the same gathered rows gets the same bits; all −inf gives −inf. Needs no scratch.
void combine_shard_logsumexp(const OpContext& ctx, const Tensor& shard_lses, const Tensor& lse);

// Step 3. Returns {Σ over counted rows of loss_t, count}; per_token_loss (optional) gets loss_t,
// 0 on rows not counted. Undefined dhidden AND dlm_weight: forward only (no vocab product at
// all: the loss needs only lse and target_logit).
CrossEntropyResult vocab_shard_cross_entropy(
    const OpContext& ctx, const Tensor& hidden, const Tensor& lm_weight_shard,
    const VocabShardRange& shard, const Tensor& labels, const Tensor& loss_mask, const Tensor& lse,
    const Tensor& target_logit, const Tensor& per_token_loss, const Tensor& dhidden,
    const Tensor& dlm_weight, const CrossEntropyOptions& options = {});

}  // namespace dyncp::ops
