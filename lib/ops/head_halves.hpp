#pragma once
// Splitting each head's row into two halves and joining them back: the gated attention's
// q_proj output is [T, Hq, 2d] with, per head, the query in [0, d) and the gate in [d, 2d)
// (reference qwen-moe.md §3.3: per head, NOT all queries then all gates).
//
//   split: packed [T, H, 2d] -> first [T, H, d] = packed[:, :, :d], second = packed[:, :, d:]
//   merge: the inverse (and the backward of split): packed[:, :, :d] = first, [d:] = second
//
// Any rank >= 2 works: the last dim of `packed` is twice that of `first` / `second`, the leading
// dims agree. One float dtype. Outputs overwrite and must not alias the inputs. No scratch.

#include "ops/context.hpp"

namespace dyncp::ops {

void split_head_halves(const OpContext& ctx, const Tensor& packed, const Tensor& first,
                       const Tensor& second);
void merge_head_halves(const OpContext& ctx, const Tensor& first, const Tensor& second,
                       const Tensor& packed);

}  // namespace dyncp::ops
