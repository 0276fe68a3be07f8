#pragma once
// Token embedding: out[t] = table[token_ids[t]].
// token_ids: i32 [T]; table: [V, h]; out: [T, h].
// An id outside [0, V) is a data error naming the token index and the id.

#include <cstdint>

#include "ops/context.hpp"
#include "ops/vocab_shard.hpp"

namespace dyncp::ops {

void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                       const Tensor& out);
// dtable[token_ids[t]] += dout[t]  (parameter gradient: accumulates; rows summed in token
// order, so the result is deterministic). padding_idx >= 0: that row gets nothing, as
// torch's nn.Embedding(padding_idx).
void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                        const Tensor& dtable, std::int64_t padding_idx = -1);

// The vocabulary-parallel embedding (tensor parallelism): `table` holds rows
// [shard.first, shard.first + V_local) of the whole [V, h] table (ops/vocab_shard.hpp).
// out[t] = table[token_ids[t] − shard.first] when the id is in the shard, else a zero row, so the
// sum of the TP ranks' outputs (the caller's all-reduce) is the whole embedding_forward.
// Ids outside [0, shard.vocab_size) are a data error naming the token index and the id, on every
// shard. table: [V_local, h]; out: [T, h].
void embedding_shard_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                             const VocabShardRange& shard, const Tensor& out);
// dtable[token_ids[t] − shard.first] += dout[t] for the ids in the shard (parameter gradient:
// accumulates; token order on the CPU, deterministic; atomics on CUDA as embedding_backward);
// the shard's rows of the whole embedding_backward. padding_idx is a whole-vocabulary id (that
// row gets nothing on the shard holding it), -1 for none.
void embedding_shard_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                              const Tensor& dtable, const VocabShardRange& shard,
                              std::int64_t padding_idx = -1);

}  // namespace dyncp::ops
