#pragma once
// The one place the all-to-all CP exchange reorders memory by head: cutting a rank's rows into
// one block per destination rank (that rank's heads) before the all-to-all, and putting the
// blocks that come back into the heads they belong to. Both are host loops over rows (like
// row_copy.hpp); on the GPU path they are the candidates for a kernel.
//
//   local  [T, H, w]        (w: elements per head; 1 for [T, H] tensors such as lse or g)
//   blocks [R, T, n, w]     block j = local[:, first[j] : first[j] + n, :]
//
// Example, H = 4, R = 2, n = 2, first = {0, 2}: block 0 holds heads 0-1 of every row, block 1
// heads 2-3. With K/V replication (R = 4 ranks, 2 heads, n = 1, first = {0, 0, 1, 1}) a head
// appears in several blocks.
//
// Device tensors move by strided device copies (one per block), never through host memory.

#include <cstdint>
#include <span>

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace dyncp::parallel {

// blocks[j] = the heads [first[j], first[j] + n) of every row of local.
void pack_head_blocks(const ops::OpContext& ctx, const core::Tensor& local,
                      std::span<const std::int64_t> first, std::int64_t n,
                      const core::Tensor& blocks);

// The inverse: local's heads [first[j], first[j] + n) from blocks[j]. With sum_repeated, heads
// named by several blocks get the sum of those blocks in block order (local is overwritten:
// heads named by no block become zero); without it each block is copied (every head must be
// named once). f32 / f64 for sums, any dtype for copies. On the device the sums are made in
// `blocks` (it is overwritten), in the same order, so both devices round alike; there a head
// must be named only by blocks that start at the same head (as head_sharding.hpp assigns them).
void unpack_head_blocks(const ops::OpContext& ctx, const core::Tensor& blocks,
                        std::span<const std::int64_t> first, std::int64_t n,
                        const core::Tensor& local, bool sum_repeated);

}  // namespace dyncp::parallel
