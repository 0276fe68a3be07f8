#include <algorithm>
#include <cstring>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/embedding.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

// vocab_size: the whole vocabulary the ids are checked against (the table's rows, or the
// vocabulary a shard's table is part of).
void check(std::string_view op, const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
           const Tensor& rows, std::int64_t vocab_size) {
  detail::require_float_operands_on_any_device(op, ctx, {{"table", &table}, {"rows", &rows}});
  detail::require_dtype(op, "token_ids", token_ids, DType::i32);
  detail::require_rank(op, "token_ids", token_ids, 1);
  detail::require_device(op, ctx, "token_ids", token_ids);
  detail::require_rank(op, "table", table, 2);
  detail::require_shape(op, "out/dout", rows, Shape{token_ids.size(0), table.size(1)});
  // On the device the kernel flags the first bad id and the backend raises the same error.
  if (ctx.device == Device::cuda) return;
  const std::int32_t* ids = token_ids.data<std::int32_t>();
  const std::int64_t vocab = vocab_size;
  for (std::int64_t t = 0; t < token_ids.size(0); ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) {
      core::throw_data_error("token " + std::to_string(t),
                             std::string(op) + ": token id " + std::to_string(ids[t]) +
                                 " is outside the vocabulary [0, " + std::to_string(vocab) +
                                 "); check the tokenizer matches the model's vocab_size");
    }
  }
}

}  // namespace

void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                       const Tensor& out) {
  constexpr std::string_view op = "embedding_forward";
  check(op, ctx, token_ids, table, out, table.size(0));
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).embedding_forward(ctx, token_ids, table, out);
  const std::int32_t* ids = token_ids.data<std::int32_t>();
  const std::int64_t hidden = table.size(1);
  const std::size_t row_bytes = static_cast<std::size_t>(hidden) * core::dtype_size(table.dtype());
  const auto* src = static_cast<const std::byte*>(table.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (std::int64_t t = 0; t < token_ids.size(0); ++t) {
    std::memcpy(dst + static_cast<std::size_t>(t) * row_bytes,
                src + static_cast<std::size_t>(ids[t]) * row_bytes, row_bytes);
  }
}

void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                        const Tensor& dtable, std::int64_t padding_idx) {
  constexpr std::string_view op = "embedding_backward";
  check(op, ctx, token_ids, dtable, dout, dtable.size(0));
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).embedding_backward(ctx, token_ids, dout, dtable, padding_idx);
  const std::int32_t* ids = token_ids.data<std::int32_t>();
  const std::int64_t hidden = dtable.size(1);
  detail::dispatch_float(op, dtable.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* grad = dout.data<T>();
    T* table_grad = dtable.data<T>();
    for (std::int64_t t = 0; t < token_ids.size(0); ++t) {
      if (ids[t] == padding_idx) continue;
      T* row = table_grad + static_cast<std::int64_t>(ids[t]) * hidden;
      const T* g = grad + t * hidden;
      for (std::int64_t j = 0; j < hidden; ++j) row[j] += g[j];
    }
  });
}

void embedding_shard_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                             const VocabShardRange& shard, const Tensor& out) {
  constexpr std::string_view op = "embedding_shard_forward";
  detail::require_rank(op, "table", table, 2);
  detail::require_vocab_shard(op, shard, table.size(0));
  check(op, ctx, token_ids, table, out, shard.vocab_size);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).embedding_shard_forward(ctx, token_ids, table, shard, out);
  const std::int32_t* ids = token_ids.data<std::int32_t>();
  const std::int64_t rows = table.size(0);
  const std::size_t row_bytes =
      static_cast<std::size_t>(table.size(1)) * core::dtype_size(table.dtype());
  const auto* src = static_cast<const std::byte*>(table.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (std::int64_t t = 0; t < token_ids.size(0); ++t) {
    std::byte* row = dst + static_cast<std::size_t>(t) * row_bytes;
    const std::int64_t local = ids[t] - shard.first;
    if (local >= 0 && local < rows) {
      std::memcpy(row, src + static_cast<std::size_t>(local) * row_bytes, row_bytes);
    } else {
      std::fill(row, row + row_bytes, std::byte{0});  // all-zero bytes: 0.0 in f32 and f64
    }
  }
}

void embedding_shard_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                              const Tensor& dtable, const VocabShardRange& shard,
                              std::int64_t padding_idx) {
  constexpr std::string_view op = "embedding_shard_backward";
  detail::require_rank(op, "dtable", dtable, 2);
  detail::require_vocab_shard(op, shard, dtable.size(0));
  check(op, ctx, token_ids, dtable, dout, shard.vocab_size);
  if (ctx.device == Device::cuda) {
    return detail::device_ops(op).embedding_shard_backward(ctx, token_ids, dout, dtable, shard,
                                                           padding_idx);
  }
  const std::int32_t* ids = token_ids.data<std::int32_t>();
  const std::int64_t hidden = dtable.size(1), rows = dtable.size(0);
  detail::dispatch_float(op, dtable.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* grad = dout.data<T>();
    T* table_grad = dtable.data<T>();
    for (std::int64_t t = 0; t < token_ids.size(0); ++t) {
      const std::int64_t local = ids[t] - shard.first;
      if (ids[t] == padding_idx || local < 0 || local >= rows) continue;
      T* row = table_grad + local * hidden;
      const T* g = grad + t * hidden;
      for (std::int64_t j = 0; j < hidden; ++j) row[j] += g[j];
    }
  });
}

}  // namespace dyncp::ops
