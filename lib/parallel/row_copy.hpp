#pragma once
// Row moves between tensors whose leading dimension is rows and whose rows have the same width
// (any dtype): what the CP seams do when they reorder gathered rows or cut out their own.
// Tensors on the host or the device (device rows move by device copies, one per run of
// consecutive rows); `index` is host memory.

#include <cstdint>

#include "core/tensor.hpp"

namespace dyncp::parallel {

// count rows of src from src_row on into dst from dst_row on.
void copy_rows(const core::Tensor& src, std::int64_t src_row, const core::Tensor& dst,
               std::int64_t dst_row, std::int64_t count);
// dst[r] = src[index[r]] for every row r of dst.
void gather_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index);
// dst[index[r]] = src[r] for every row r of src.
void scatter_rows(const core::Tensor& src, const core::Tensor& dst, const std::int32_t* index);

}  // namespace dyncp::parallel
