#include "parallel/row_copy.hpp"

#include <cstddef>
#include <cstring>

#include "core/device_memory.hpp"

namespace dyncp::parallel {

namespace {

std::size_t row_bytes(const core::Tensor& t) {
  return static_cast<std::size_t>(t.shape().row_numel()) * core::dtype_size(t.dtype());
}

std::byte* row(const core::Tensor& t, std::int64_t r, std::size_t bytes) {
  return static_cast<std::byte*>(t.raw_data()) + static_cast<std::size_t>(r) * bytes;
}

// One contiguous move; on the device a device-to-device copy (host code cannot touch the rows).
void move(const core::Tensor& dst, std::byte* to, const core::Tensor& src, const std::byte* from,
          std::size_t bytes) {
  if (dst.device() == core::Device::cpu && src.device() == core::Device::cpu) {
    std::memcpy(to, from, bytes);
  } else {
    core::device_memory().copy(to, dst.device(), from, src.device(), bytes);
  }
}

// Rows r with index[r] consecutive move together: the CP reorders are runs of whole chunks, so
// a device tensor takes one copy per chunk rather than per row.
template <typename Move>
void for_each_run(std::int64_t rows, const std::int32_t* index, Move&& move_run) {
  std::int64_t start = 0;
  while (start < rows) {
    std::int64_t end = start + 1;
    while (end < rows && index[end] == index[end - 1] + 1) ++end;
    move_run(start, index[start], end - start);
    start = end;
  }
}

}  // namespace

void copy_rows(const core::Tensor& src, std::int64_t src_row, const core::Tensor& dst,
               std::int64_t dst_row, std::int64_t count) {
  if (count <= 0) return;
  const std::size_t bytes = row_bytes(src);
  move(dst, row(dst, dst_row, bytes), src, row(src, src_row, bytes),
       bytes * static_cast<std::size_t>(count));
}

void gather_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index) {
  const std::size_t bytes = row_bytes(dst);
  for_each_run(dst.size(0), index, [&](std::int64_t r, std::int64_t from, std::int64_t n) {
    move(dst, row(dst, r, bytes), src, row(src, from, bytes), bytes * static_cast<std::size_t>(n));
  });
}

void scatter_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index) {
  const std::size_t bytes = row_bytes(src);
  for_each_run(src.size(0), index, [&](std::int64_t r, std::int64_t to, std::int64_t n) {
    move(dst, row(dst, to, bytes), src, row(src, r, bytes), bytes * static_cast<std::size_t>(n));
  });
}

}  // namespace dyncp::parallel
