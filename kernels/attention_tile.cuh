#pragma once
// Shared-memory tile helpers for the attention kernels (internal to kernels/).
//
// Tiles are row-major in shared memory with padded rows (8 bf16 / 4 floats) so the 16 rows a
// WMMA fragment reads start in different banks; every region starts 128-byte aligned (WMMA
// needs 32). Products go through nvcuda::wmma 16x16x16 bf16 fragments with fp32 accumulators.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cstdint>
#include <type_traits>

namespace dyncp::kernels {
struct AttentionShape;
// Throws a runtime core::Error naming `op` when the shape is outside what the kernels handle.
void check_attention_shape(const AttentionShape& shape, const char* op);
}  // namespace dyncp::kernels

namespace dyncp::kernels::attention_detail {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBf16Pad = 8;
constexpr int kF32Pad = 4;
constexpr int kMaxHeadDim = 256;

// Carves a dynamic shared-memory buffer into aligned regions (host and device).
struct SmemCursor {
  std::size_t offset = 0;
  __host__ __device__ std::size_t take(std::size_t bytes) {
    const std::size_t at = offset;
    offset = (offset + bytes + 127) / 128 * 128;
    return at;
  }
};

// Copies rows [row0, row0 + rows) of one head of a [T, H, d] bf16 tensor into a padded
// [tile_rows, d + pad] tile; rows past `rows` are zero. 16-byte copies (d % 8 == 0).
__device__ inline void load_tile(bf16* tile, const bf16* src, std::int64_t row0, int rows,
                                 int tile_rows, int heads, int head, int d) {
  const int vectors_per_row = d / 8, ld = d + kBf16Pad;
  for (int i = threadIdx.x; i < tile_rows * vectors_per_row; i += blockDim.x) {
    const int r = i / vectors_per_row, c = (i % vectors_per_row) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < rows)
      value = *reinterpret_cast<const uint4*>(src + ((row0 + r) * heads + head) * d + c);
    *reinterpret_cast<uint4*>(tile + r * ld + c) = value;
  }
}

// acc[m x n] (fp32, shared, ld_c) op= A[m x k] · B[k x n], split into 16x16 output fragments
// dealt round-robin to the warps. A and B are bf16 in shared memory; each is row-major or
// column-major per its layout tag (column-major reads a row-major tile as its transpose).
// With `accumulate` false the result overwrites acc.
template <typename LayoutA, typename LayoutB>
__device__ inline void mma_tile(float* acc, int ld_c, const bf16* a, int ld_a, const bf16* b,
                                int ld_b, int m, int n, int k, bool accumulate) {
  const int warp = threadIdx.x / 32, tiles_n = n / 16;
  for (int f = warp; f < (m / 16) * tiles_n; f += kWarps) {
    const int tm = f / tiles_n, tn = f % tiles_n;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    if (accumulate) {
      wmma::load_matrix_sync(c, acc + tm * 16 * ld_c + tn * 16, ld_c, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(c, 0.0f);
    }
    for (int kk = 0; kk < k / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
      // Element (i, j) of a row-major operand is at [i * ld + j]; of a column-major one at
      // [j * ld + i].
      const bf16* pa = std::is_same_v<LayoutA, wmma::row_major> ? a + tm * 16 * ld_a + kk * 16
                                                                : a + kk * 16 * ld_a + tm * 16;
      const bf16* pb = std::is_same_v<LayoutB, wmma::row_major> ? b + kk * 16 * ld_b + tn * 16
                                                                : b + tn * 16 * ld_b + kk * 16;
      wmma::load_matrix_sync(fa, pa, ld_a);
      wmma::load_matrix_sync(fb, pb, ld_b);
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(acc + tm * 16 * ld_c + tn * 16, c, ld_c, wmma::mem_row_major);
  }
}

}  // namespace dyncp::kernels::attention_detail
