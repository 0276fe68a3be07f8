#pragma once
// Token embedding: out[t] = table[token_ids[t]].
// token_ids: i32 [T]; table: [V, h]; out: [T, h].
// An id outside [0, V) is a data error naming the token index and the id.

#include "ops/context.hpp"

namespace dyncp::ops {

void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                       const Tensor& out);
// dtable[token_ids[t]] += dout[t]  (parameter gradient: accumulates; rows summed in token
// order, so the result is deterministic). padding_idx >= 0: that row gets nothing, as
// torch's nn.Embedding(padding_idx).
void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                        const Tensor& dtable, std::int64_t padding_idx = -1);

}  // namespace dyncp::ops
