#include "parallel/row_copy.hpp"

#include <cstddef>
#include <cstring>

namespace dyncp::parallel {

namespace {

std::size_t row_bytes(const core::Tensor& t) {
  return static_cast<std::size_t>(t.shape().row_numel()) * core::dtype_size(t.dtype());
}

std::byte* row(const core::Tensor& t, std::int64_t r, std::size_t bytes) {
  return static_cast<std::byte*>(t.raw_data()) + static_cast<std::size_t>(r) * bytes;
}

}  // namespace

void copy_rows(const core::Tensor& src, std::int64_t src_row, const core::Tensor& dst,
               std::int64_t dst_row, std::int64_t count) {
  if (count <= 0) return;
  const std::size_t bytes = row_bytes(src);
  std::memcpy(row(dst, dst_row, bytes), row(src, src_row, bytes),
              bytes * static_cast<std::size_t>(count));
}

void gather_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index) {
  const std::size_t bytes = row_bytes(dst);
  for (std::int64_t r = 0; r < dst.size(0); ++r)
    std::memcpy(row(dst, r, bytes), row(src, index[r], bytes), bytes);
}

void scatter_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index) {
  const std::size_t bytes = row_bytes(src);
  for (std::int64_t r = 0; r < src.size(0); ++r)
    std::memcpy(row(dst, index[r], bytes), row(src, r, bytes), bytes);
}

}  // namespace dyncp::parallel
