#include "model/vocab_parallel.hpp"

#include "model/tensor_parallel_region.hpp"
#include "ops/embedding.hpp"

namespace dyncp::model {

namespace {

// This rank's rows of the vocabulary: [index V/tp, (index + 1) V/tp) of the whole V.
ops::VocabShardRange vocabulary_shard(const LayerRunContext& run, const Tensor& table) {
  const std::int64_t rows = table.size(0);
  return {rows * run.seams.tensor_parallel->rank(), rows * run.seams.tensor_parallel->size()};
}

}  // namespace

void vocabulary_embedding_forward(const LayerRunContext& run, const Tensor& token_ids,
                                  const Tensor& table, const Tensor& out) {
  const TensorParallelRegion region(run);
  if (!region.active()) return ops::embedding_forward(run.seam.ops, token_ids, table, out);
  core::ArenaScope temporaries(*run.seam.scratch);
  const Tensor partial =
      region.sequence_parallel()
          ? run.seam.scratch->allocate({token_ids.size(0), table.size(1)}, out.dtype())
          : out;
  ops::embedding_shard_forward(run.seam.ops, token_ids, table, vocabulary_shard(run, table),
                               partial);
  if (region.sequence_parallel()) {
    region.sum_output(partial, out, ops::GradMode::overwrite);
  } else {
    region.all_reduce(out);
  }
}

void vocabulary_embedding_backward(const LayerRunContext& run, const Tensor& token_ids,
                                   const Tensor& grad, const Tensor& table_grad,
                                   std::int64_t padding_idx) {
  const TensorParallelRegion region(run);
  if (!region.active())
    return ops::embedding_backward(run.seam.ops, token_ids, grad, table_grad, padding_idx);
  core::ArenaScope temporaries(*run.seam.scratch);
  ops::embedding_shard_backward(run.seam.ops, token_ids, region.gathered(grad), table_grad,
                                vocabulary_shard(run, table_grad), padding_idx);
}

ops::CrossEntropyResult vocabulary_cross_entropy(
    const LayerRunContext& run, const Tensor& hidden, const Tensor& lm_weight, const Tensor& labels,
    const Tensor& loss_mask, const Tensor& per_token_loss, const Tensor& dhidden,
    const Tensor& dlm_weight, const ops::CrossEntropyOptions& options, const Tensor& all_hidden) {
  const ops::OpContext& ctx = run.seam.ops;
  const TensorParallelRegion region(run);
  if (!region.active()) {
    if (all_hidden.defined()) all_hidden.copy_from(hidden);
    return ops::fused_cross_entropy(ctx, hidden, lm_weight, labels, loss_mask, per_token_loss,
                                    dhidden, dlm_weight, options);
  }
  core::Arena& scratch = *run.seam.scratch;
  core::ArenaScope temporaries(scratch);
  const Tensor rows = region.gathered(hidden);
  if (all_hidden.defined()) all_hidden.copy_from(rows);
  const std::int64_t tokens = rows.size(0);
  const int tp = run.seams.tensor_parallel->size();
  const ops::VocabShardRange shard = vocabulary_shard(run, lm_weight);
  // Pass 1 on this rank's columns, then the whole vocabulary's log-sum-exp and target logit.
  const Tensor shard_lse = scratch.allocate({tokens}, hidden.dtype());
  const Tensor target_logit = scratch.allocate({tokens}, hidden.dtype());
  ops::vocab_shard_logsumexp(ctx, rows, lm_weight, shard, labels, loss_mask, shard_lse,
                             target_logit, options);
  const Tensor every_shard = scratch.allocate({tp * tokens}, hidden.dtype());
  run.seams.tensor_parallel->all_gather_rows(run.seam, shard_lse, every_shard);
  const Tensor lse = scratch.allocate({tokens}, hidden.dtype());
  ops::combine_shard_logsumexp(ctx, every_shard.reshape({tp, tokens}), lse);
  region.all_reduce(target_logit);  // one rank holds each label: the sum is exact
  // Pass 2: the loss, and this rank's part of the hidden rows' gradient summed over TP.
  const Tensor drows = dhidden.defined() ? region.input_grad_buffer(dhidden, tokens) : Tensor{};
  const ops::CrossEntropyResult result =
      ops::vocab_shard_cross_entropy(ctx, rows, lm_weight, shard, labels, loss_mask, lse,
                                     target_logit, per_token_loss, drows, dlm_weight, options);
  if (dhidden.defined()) region.sum_input_grad(drows, dhidden);
  return result;
}

}  // namespace dyncp::model
