#include "parallel/head_blocks.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace dyncp::parallel {

namespace {

struct HeadGeometry {
  std::int64_t rows = 0, heads = 0, width = 0;
};

HeadGeometry geometry_of(const core::Tensor& local) {
  DYNCP_CHECK(local.shape().rank() >= 2, "head blocks: a [T, H, ...] tensor");
  HeadGeometry g;
  g.rows = local.size(0);
  g.heads = local.size(1);
  g.width = g.heads == 0 ? 0 : local.shape().row_numel() / g.heads;
  return g;
}

void check_blocks(const HeadGeometry& g, std::span<const std::int64_t> first, std::int64_t n,
                  const core::Tensor& blocks, const core::Tensor& local) {
  DYNCP_CHECK(blocks.dtype() == local.dtype(), "head blocks: one dtype");
  DYNCP_CHECK(blocks.numel() == static_cast<std::int64_t>(first.size()) * g.rows * n * g.width,
              "head blocks: blocks hold R x T x n heads");
  for (const std::int64_t f : first)
    DYNCP_CHECK(f >= 0 && f + n <= g.heads, "head blocks: a block's heads lie inside H");
}

template <typename T>
void add_heads(const T* src, T* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] += src[i];
}

// The bytes of one block's heads in a row, and how far apart rows are on either side.
struct BlockBytes {
  std::size_t element = 0, row = 0, block_row = 0;
  BlockBytes(const HeadGeometry& g, std::int64_t n, core::DType dtype)
      : element(core::dtype_size(dtype)),
        row(static_cast<std::size_t>(g.heads * g.width) * element),
        block_row(static_cast<std::size_t>(n * g.width) * element) {}
  std::size_t head_offset(std::int64_t head, const HeadGeometry& g) const {
    return static_cast<std::size_t>(head * g.width) * element;
  }
};

// Device sums of replicated heads, made in the blocks: every later block naming the same heads
// is added into the first one (in block order, so the rounding is the host loop's), which
// alone is then copied out.
std::vector<bool> fold_repeated_blocks(const ops::OpContext& ctx, const core::Tensor& blocks,
                                       std::span<const std::int64_t> first, std::int64_t n,
                                       std::int64_t rows) {
  std::vector<bool> copied(first.size(), true);
  for (std::size_t j = 0; j < first.size(); ++j) {
    if (!copied[j]) continue;
    const core::Tensor into =
        blocks.slice(static_cast<std::int64_t>(j) * rows, static_cast<std::int64_t>(j + 1) * rows);
    for (std::size_t later = j + 1; later < first.size(); ++later) {
      if (first[later] == first[j]) {
        const core::Tensor from = blocks.slice(static_cast<std::int64_t>(later) * rows,
                                               static_cast<std::int64_t>(later + 1) * rows);
        ops::add(ctx, into, from, into);
        copied[later] = false;
      } else {
        DYNCP_CHECK(first[later] + n <= first[j] || first[j] + n <= first[later],
                    "head blocks: on the device, replicated heads come in blocks that start at "
                    "the same head");
      }
    }
  }
  return copied;
}

}  // namespace

void pack_head_blocks(const ops::OpContext& ctx, const core::Tensor& local,
                      std::span<const std::int64_t> first, std::int64_t n,
                      const core::Tensor& blocks) {
  const HeadGeometry g = geometry_of(local);
  check_blocks(g, first, n, blocks, local);
  DYNCP_CHECK(local.device() == ctx.device && blocks.device() == ctx.device,
              "head blocks: tensors on the context's device");
  if (ctx.device == core::Device::cuda) {
    const BlockBytes bytes(g, n, local.dtype());
    auto* dst = static_cast<std::byte*>(blocks.raw_data());
    const auto* src = static_cast<const std::byte*>(local.raw_data());
    for (const std::int64_t head : first) {
      if (g.rows > 0 && bytes.block_row > 0) {
        core::device_memory().copy_2d(dst, bytes.block_row, src + bytes.head_offset(head, g),
                                      bytes.row, bytes.block_row, static_cast<std::size_t>(g.rows));
      }
      dst += bytes.block_row * static_cast<std::size_t>(g.rows);
    }
    return;
  }
  const std::size_t element = core::dtype_size(local.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(g.heads * g.width) * element;
  const std::size_t block_row_bytes = static_cast<std::size_t>(n * g.width) * element;
  const auto* src = static_cast<const std::byte*>(local.raw_data());
  auto* dst = static_cast<std::byte*>(blocks.raw_data());
  for (std::size_t j = 0; j < first.size(); ++j) {
    const std::size_t offset = static_cast<std::size_t>(first[j] * g.width) * element;
    for (std::int64_t t = 0; t < g.rows; ++t) {
      std::memcpy(dst, src + static_cast<std::size_t>(t) * row_bytes + offset, block_row_bytes);
      dst += block_row_bytes;
    }
  }
}

void unpack_head_blocks(const ops::OpContext& ctx, const core::Tensor& blocks,
                        std::span<const std::int64_t> first, std::int64_t n,
                        const core::Tensor& local, bool sum_repeated) {
  const HeadGeometry g = geometry_of(local);
  check_blocks(g, first, n, blocks, local);
  DYNCP_CHECK(local.device() == ctx.device && blocks.device() == ctx.device,
              "head blocks: tensors on the context's device");
  const core::DType dtype = local.dtype();
  if (sum_repeated) {
    DYNCP_CHECK(dtype == core::DType::f32 || dtype == core::DType::f64,
                "head blocks: replicated heads are summed in f32 or f64");
  }
  if (ctx.device == core::Device::cuda) {
    std::vector<bool> copied(first.size(), true);
    if (sum_repeated) {
      local.fill_zero();  // heads no block names
      copied = fold_repeated_blocks(ctx, blocks, first, n, g.rows);
    }
    const BlockBytes bytes(g, n, dtype);
    auto* dst = static_cast<std::byte*>(local.raw_data());
    const auto* src = static_cast<const std::byte*>(blocks.raw_data());
    for (std::size_t j = 0; j < first.size(); ++j) {
      if (copied[j] && g.rows > 0 && bytes.block_row > 0) {
        core::device_memory().copy_2d(dst + bytes.head_offset(first[j], g), bytes.row, src,
                                      bytes.block_row, bytes.block_row,
                                      static_cast<std::size_t>(g.rows));
      }
      src += bytes.block_row * static_cast<std::size_t>(g.rows);
    }
    return;
  }
  const std::size_t element = core::dtype_size(dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(g.heads * g.width) * element;
  const std::size_t block_row_bytes = static_cast<std::size_t>(n * g.width) * element;
  const auto* src = static_cast<const std::byte*>(blocks.raw_data());
  auto* dst = static_cast<std::byte*>(local.raw_data());
  if (sum_repeated) local.fill_zero();
  const auto count = static_cast<std::size_t>(n * g.width);
  for (std::size_t j = 0; j < first.size(); ++j) {
    const std::size_t offset = static_cast<std::size_t>(first[j] * g.width) * element;
    for (std::int64_t t = 0; t < g.rows; ++t) {
      std::byte* target = dst + static_cast<std::size_t>(t) * row_bytes + offset;
      if (!sum_repeated) {
        std::memcpy(target, src, block_row_bytes);
      } else if (dtype == core::DType::f64) {
        add_heads(reinterpret_cast<const double*>(src), reinterpret_cast<double*>(target), count);
      } else {
        add_heads(reinterpret_cast<const float*>(src), reinterpret_cast<float*>(target), count);
      }
      src += block_row_bytes;
    }
  }
}

}  // namespace dyncp::parallel
