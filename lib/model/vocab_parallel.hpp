#pragma once
// The two ends of the model under tensor parallelism (internal to lib/model): the embedding
// and the LM head are vocabulary-parallel, each TP rank holding rows [first, first + V/tp) of
// the whole tables (Megatron's VocabParallelEmbedding and vocab-parallel cross-entropy).
//
//   embedding   each rank looks up the ids of its rows of the vocabulary (zeros elsewhere);
//               the partial rows are summed over TP (SP: reduce-scattered to the rank's rows)
//   LM head     every rank sees every row of the final hidden states (SP: all-gathered); per
//               token its shard's log-sum-exp and the target's logit are combined over TP
//               (one all-gather of T floats, one all-reduce of T floats), so the loss is the
//               same on every TP rank and the logits are never gathered; the hidden states'
//               gradient is this rank's part, summed over TP like a row-parallel output
// Without tensor parallelism both are the whole-vocabulary ops, bit for bit.

#include "model/decoder_layer.hpp"
#include "ops/vocab_parallel_cross_entropy.hpp"

namespace dyncp::model {

// out [R, h] (the residual stream's rows) = the embedding of token_ids [T] (every row).
void vocabulary_embedding_forward(const LayerRunContext& run, const Tensor& token_ids,
                                  const Tensor& table, const Tensor& out);
// table_grad += the embedding's gradient from grad [R, h] (the stream's rows).
void vocabulary_embedding_backward(const LayerRunContext& run, const Tensor& token_ids,
                                   const Tensor& grad, const Tensor& table_grad,
                                   std::int64_t padding_idx);

// Loss sum and count of the LM head + cross-entropy on hidden [R, h] (the stream's rows;
// labels, loss_mask and per_token_loss cover every row), as ops::fused_cross_entropy. With
// dhidden [R, h] (overwrite) and dlm_weight (accumulates) defined, the gradients too.
// all_hidden, when defined, receives hidden's every row [T, h] (BinOptions::final_hidden).
ops::CrossEntropyResult vocabulary_cross_entropy(
    const LayerRunContext& run, const Tensor& hidden, const Tensor& lm_weight, const Tensor& labels,
    const Tensor& loss_mask, const Tensor& per_token_loss, const Tensor& dhidden,
    const Tensor& dlm_weight, const ops::CrossEntropyOptions& options, const Tensor& all_hidden);

}  // namespace dyncp::model
