// CudaVocabShardOps: the vocabulary-parallel embedding and LM head + cross-entropy on kernels/.
// A step-1 or step-3 cross-entropy call synchronises once: the counted rows are listed on the
// device and their count (which sizes the chunk loop), the first bad label and, in step 3, the
// loss sum come back in one copy. The combine and the gradient chunks never synchronise.
#include "ops/cuda/cuda_vocab_shard_ops.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "ops.hpp"
#include "ops/cuda/cuda_op_args.hpp"
#include "vocab_parallel_cross_entropy.hpp"

namespace dyncp::ops::cuda {
namespace {

using core::DType;

const std::uint8_t* u8(const Tensor& t) {
  return t.defined() ? t.data<std::uint8_t>() : nullptr;
}

// The value of device i32 element `index` (the error paths name the offending id).
std::int32_t id_at(const Tensor& ids, std::int32_t index) {
  return read_back(ids.data<std::int32_t>() + index);
}

// The counted rows of a call, listed on the device in token order, and the status read back
// (given lse and target, the loss and per_token_loss too). A label >= vocab_size is the data
// error the CPU op raises.
struct ListedRows {
  const std::int32_t* row_index = nullptr;
  kernels::LossRowsStatus status;
};

ListedRows list_rows(core::Arena& scratch, std::string_view op, const Tensor& labels,
                     const Tensor& loss_mask, std::int64_t vocab_size, const Tensor& lse,
                     const Tensor& target, const Tensor& per_token_loss, cudaStream_t stream) {
  const std::int64_t tokens = labels.size(0);
  const Tensor index = scratch.allocate({std::max<std::int64_t>(tokens, 1)}, DType::i32);
  const Tensor status = scratch.allocate(
      {static_cast<std::int64_t>((sizeof(kernels::LossRowsStatus) + 3) / 4)}, DType::i32);
  auto* device_status = static_cast<kernels::LossRowsStatus*>(status.raw_data());
  kernels::list_loss_rows(i32(labels), u8(loss_mask), tokens, vocab_size, f32(lse), f32(target),
                          f32(per_token_loss), i32(index), device_status, stream);
  ListedRows rows{i32(index), read_back(device_status)};
  const std::int32_t bad = rows.status.bad_label;
  if (bad != INT32_MAX) {
    core::throw_data_error("token " + std::to_string(bad), std::string(op) + ": label " +
                                                               std::to_string(id_at(labels, bad)) +
                                                               " is outside the vocabulary [0, " +
                                                               std::to_string(vocab_size) + ")");
  }
  return rows;
}

// The kernels' view of a step-1 or step-3 call: operands (bf16 copies under bf16 products) and
// one tile's scratch, sized by the counted rows.
struct ShardCall {
  kernels::VocabShardArgs args;
  kernels::VocabShardScratch scratch;
};

ShardCall prepare(core::Arena& scratch, const OpContext& ctx, const Tensor& hidden,
                  const Tensor& weight, const VocabShardRange& shard, const Tensor& labels,
                  const ListedRows& rows, const CrossEntropyOptions& options, bool gradients) {
  ShardCall call;
  kernels::VocabShardArgs& a = call.args;
  const bool bf16 = bf16_products(ctx);
  a.fp32 = !bf16;
  a.labels = i32(labels);
  a.row_index = rows.row_index;
  a.count = rows.status.count;
  a.tokens = hidden.size(0);
  a.hidden_size = hidden.size(1);
  a.shard_rows = weight.size(0);
  a.shard_first = shard.first;
  a.token_chunk = std::max<std::int64_t>(1, std::min<std::int64_t>(options.token_chunk, a.count));
  a.vocab_chunk = std::min(options.vocab_chunk, a.shard_rows);
  if (a.count == 0) return call;  // nothing to multiply: the outputs are only zeroed
  const cudaStream_t stream = stream_of(ctx);
  a.hidden = bf16 ? static_cast<const void*>(to_bf16(scratch, hidden, stream)) : f32(hidden);
  a.lm_weight = bf16 ? static_cast<const void*>(to_bf16(scratch, weight, stream)) : f32(weight);
  const DType operand = bf16 ? DType::bf16 : DType::f32;
  kernels::VocabShardScratch& s = call.scratch;
  s.h_rows = scratch.allocate({a.token_chunk, a.hidden_size}, operand).raw_data();
  s.logits = f32(scratch.allocate({a.token_chunk, a.vocab_chunk}, DType::f32));
  if (gradients) {
    s.dlogits = scratch.allocate({a.token_chunk, a.vocab_chunk}, operand).raw_data();
    s.dh_rows = f32(scratch.allocate({a.token_chunk, a.hidden_size}, DType::f32));
  } else {
    s.row_max = f32(scratch.allocate({a.token_chunk}, DType::f32));
    s.row_sum = f32(scratch.allocate({a.token_chunk}, DType::f32));
    s.row_target = f32(scratch.allocate({a.token_chunk}, DType::f32));
  }
  return call;
}

}  // namespace

void CudaVocabShardOps::embedding_shard_forward(const OpContext& ctx, const Tensor& token_ids,
                                                const Tensor& table, const VocabShardRange& shard,
                                                const Tensor& out) {
  core::Arena& scratch = scratch_of(ctx, "embedding_shard_forward");
  core::ArenaScope temporaries(scratch);
  std::int32_t* bad = device_scalar<std::int32_t>(scratch, INT32_MAX);
  kernels::embedding_shard_forward(i32(token_ids), f32(table), f32(out), token_ids.size(0),
                                   shard.first, table.size(0), shard.vocab_size, table.size(1), bad,
                                   stream_of(ctx));
  const std::int32_t first_bad = read_back(bad);
  if (first_bad != INT32_MAX) {
    core::throw_data_error(
        "token " + std::to_string(first_bad),
        "embedding_shard_forward: token id " + std::to_string(id_at(token_ids, first_bad)) +
            " is outside the vocabulary [0, " + std::to_string(shard.vocab_size) +
            "); check the tokenizer matches the model's vocab_size");
  }
}

void CudaVocabShardOps::embedding_shard_backward(const OpContext& ctx, const Tensor& token_ids,
                                                 const Tensor& dout, const Tensor& dtable,
                                                 const VocabShardRange& shard,
                                                 std::int64_t padding_idx) {
  kernels::embedding_shard_backward(i32(token_ids), f32(dout), f32(dtable), token_ids.size(0),
                                    shard.first, dtable.size(0), shard.vocab_size, dtable.size(1),
                                    padding_idx, stream_of(ctx));
}

void CudaVocabShardOps::vocab_shard_logsumexp(const OpContext& ctx, const Tensor& hidden,
                                              const Tensor& lm_weight_shard,
                                              const VocabShardRange& shard, const Tensor& labels,
                                              const Tensor& loss_mask, const Tensor& shard_lse,
                                              const Tensor& target_logit,
                                              const CrossEntropyOptions& options) {
  constexpr std::string_view op = "vocab_shard_logsumexp";
  core::Arena& scratch = scratch_of(ctx, op.data());
  core::ArenaScope temporaries(scratch);
  const cudaStream_t stream = stream_of(ctx);
  const ListedRows rows = list_rows(scratch, op, labels, loss_mask, shard.vocab_size, Tensor(),
                                    Tensor(), Tensor(), stream);
  const ShardCall call = prepare(scratch, ctx, hidden, lm_weight_shard, shard, labels, rows,
                                 options, /*gradients=*/false);
  kernels::vocab_shard_logsumexp(blas_, call.args, call.scratch, f32(shard_lse), f32(target_logit),
                                 stream);
}

void CudaVocabShardOps::combine_shard_logsumexp(const OpContext& ctx, const Tensor& shard_lses,
                                                const Tensor& lse) {
  kernels::combine_shard_logsumexp(f32(shard_lses), shard_lses.size(0), shard_lses.size(1),
                                   f32(lse), stream_of(ctx));
}

CrossEntropyResult CudaVocabShardOps::vocab_shard_cross_entropy(
    const OpContext& ctx, const Tensor& hidden, const Tensor& lm_weight_shard,
    const VocabShardRange& shard, const Tensor& labels, const Tensor& loss_mask, const Tensor& lse,
    const Tensor& target_logit, const Tensor& per_token_loss, const Tensor& dhidden,
    const Tensor& dlm_weight, const CrossEntropyOptions& options) {
  constexpr std::string_view op = "vocab_shard_cross_entropy";
  core::Arena& scratch = scratch_of(ctx, op.data());
  core::ArenaScope temporaries(scratch);
  const cudaStream_t stream = stream_of(ctx);
  // The loss needs no product: it comes back with the counted rows.
  const ListedRows rows = list_rows(scratch, op, labels, loss_mask, shard.vocab_size, lse,
                                    target_logit, per_token_loss, stream);
  CrossEntropyResult result;
  result.loss_sum = rows.status.loss_sum;
  result.num_loss_tokens = static_cast<std::int64_t>(rows.status.count);
  if (!dhidden.defined() && !dlm_weight.defined()) return result;
  const ShardCall call = prepare(scratch, ctx, hidden, lm_weight_shard, shard, labels, rows,
                                 options, /*gradients=*/true);
  kernels::vocab_shard_gradients(blas_, call.args, f32(lse), static_cast<float>(options.grad_scale),
                                 call.scratch, f32(dhidden), f32(dlm_weight), stream);
  return result;
}

}  // namespace dyncp::ops::cuda
