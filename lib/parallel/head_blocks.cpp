#include "parallel/head_blocks.hpp"

#include <cstddef>
#include <cstring>

#include "core/error.hpp"

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

}  // namespace

void pack_head_blocks(const core::Tensor& local, std::span<const std::int64_t> first,
                      std::int64_t n, const core::Tensor& blocks) {
  const HeadGeometry g = geometry_of(local);
  check_blocks(g, first, n, blocks, local);
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

void unpack_head_blocks(const core::Tensor& blocks, std::span<const std::int64_t> first,
                        std::int64_t n, const core::Tensor& local, bool sum_repeated) {
  const HeadGeometry g = geometry_of(local);
  check_blocks(g, first, n, blocks, local);
  const core::DType dtype = local.dtype();
  const std::size_t element = core::dtype_size(dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(g.heads * g.width) * element;
  const std::size_t block_row_bytes = static_cast<std::size_t>(n * g.width) * element;
  const auto* src = static_cast<const std::byte*>(blocks.raw_data());
  auto* dst = static_cast<std::byte*>(local.raw_data());
  if (sum_repeated) {
    DYNCP_CHECK(dtype == core::DType::f32 || dtype == core::DType::f64,
                "head blocks: replicated heads are summed in f32 or f64");
    local.fill_zero();
  }
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
