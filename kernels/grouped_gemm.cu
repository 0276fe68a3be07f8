// Grouped expert products with device-side group offsets (kernels/grouped_gemm.hpp).
//
// Every kernel computes 64x64 output tiles with 4 warps, staging 32-deep slices of both operands
// in shared memory (rounded to bf16 there when the products are bf16). The row-grouped kernels
// (forward, data gradient) walk a list of (expert, 64-row tile) pairs: the grid has room for
// ceil(rows / 64) + E of them, thread 0 of each block finds its pair from the offsets, and
// blocks past the last pair exit. The weight gradient gives each expert its own grid row and
// loops over that expert's rows, so each dw element has one writer and no atomics are needed.
#include <mma.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common.cuh"
#include "grouped_gemm.hpp"

namespace dyncp::kernels {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kLdC = kBN + 4;

template <typename T>
constexpr int pad() {
  return std::is_same_v<T, bf16> ? 8 : 4;  // keeps 16-byte rows, shifts banks
}

// Shared-memory tile of one operand: [rows][cols + pad], 128-byte aligned.
template <typename T, int kRows, int kCols>
struct TileLayout {
  static constexpr int ld = kCols + pad<T>();
  static constexpr int bytes = (kRows * ld * static_cast<int>(sizeof(T)) + 127) / 128 * 128;
};

struct alignas(16) Float4 {
  float x, y, z, w;
};

__device__ inline void put(float* at, float v) {
  *at = v;
}
__device__ inline void put(bf16* at, float v) {
  *at = __float2bfloat16_rn(v);
}

// dst[r][c] = src[r * ld_src + c] (fp32 in memory, T in shared) for a tile_rows x tile_cols
// tile; zero at and past rows_valid / cols_valid. 16-byte loads where the source allows.
template <typename T>
__device__ void stage(T* dst, int ld_dst, const float* src, std::int64_t ld_src,
                      std::int64_t rows_valid, std::int64_t cols_valid, int tile_rows,
                      int tile_cols) {
  const bool vector = ld_src % 4 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                      (cols_valid >= tile_cols || cols_valid % 4 == 0);
  if (vector) {
    const int per_row = tile_cols / 4;
    for (int i = threadIdx.x; i < tile_rows * per_row; i += blockDim.x) {
      const int r = i / per_row, c = (i % per_row) * 4;
      Float4 v{0.0f, 0.0f, 0.0f, 0.0f};
      if (r < rows_valid && c < cols_valid)
        v = *reinterpret_cast<const Float4*>(src + r * ld_src + c);
      T* out = dst + r * ld_dst + c;
      put(out, v.x);
      put(out + 1, v.y);
      put(out + 2, v.z);
      put(out + 3, v.w);
    }
    return;
  }
  for (int i = threadIdx.x; i < tile_rows * tile_cols; i += blockDim.x) {
    const int r = i / tile_cols, c = i % tile_cols;
    put(dst + r * ld_dst + c, r < rows_valid && c < cols_valid ? src[r * ld_src + c] : 0.0f);
  }
}

// The same from bf16 storage (bf16 activations, bf16 products only): the stored value is the
// staged operand; scalar loads.
__device__ inline void put(bf16* at, bf16 v) {
  *at = v;
}
template <typename T>
__device__ void stage(T* dst, int ld_dst, const bf16* src, std::int64_t ld_src,
                      std::int64_t rows_valid, std::int64_t cols_valid, int tile_rows,
                      int tile_cols) {
  for (int i = threadIdx.x; i < tile_rows * tile_cols; i += blockDim.x) {
    const int r = i / tile_cols, c = i % tile_cols;
    if (r < rows_valid && c < cols_valid) {
      put(dst + r * ld_dst + c, src[r * ld_src + c]);
    } else {
      put(dst + r * ld_dst + c, 0.0f);
    }
  }
}

// The 64x64 accumulator of a block. bf16: each warp holds a 32x32 quarter as 2x2 WMMA
// fragments. A is [64 x 32] and B [32 x 64] in shared memory, each row- or column-major.
template <typename T, bool kARowMajor, bool kBRowMajor>
struct BlockTile {
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];

  __device__ int warp_row() const { return (static_cast<int>(threadIdx.x) / 32 / 2) * 32; }
  __device__ int warp_col() const { return (static_cast<int>(threadIdx.x) / 32 % 2) * 32; }

  __device__ void zero() {
    for (auto& row : acc)
      for (auto& f : row) wmma::fill_fragment(f, 0.0f);
  }
  __device__ void multiply(const bf16* a, int lda, const bf16* b, int ldb) {
    const int wm = warp_row(), wn = warp_col();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb[2];
      for (int i = 0; i < 2; ++i) {
        const int m = wm + 16 * i;
        wmma::load_matrix_sync(fa[i], kARowMajor ? a + m * lda + kk : a + kk * lda + m, lda);
      }
      for (int j = 0; j < 2; ++j) {
        const int n = wn + 16 * j;
        wmma::load_matrix_sync(fb[j], kBRowMajor ? b + kk * ldb + n : b + n * ldb + kk, ldb);
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }
  __device__ void store(float* c) {
    const int wm = warp_row(), wn = warp_col();
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(c + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC,
                                wmma::mem_row_major);
  }
};

// fp32: each thread holds 4 x 8 outputs, rows tr + 16 i and columns tc + 8 j, summed in k order.
template <bool kARowMajor, bool kBRowMajor>
struct BlockTile<float, kARowMajor, kBRowMajor> {
  float acc[4][8];

  __device__ void zero() {
    for (auto& row : acc)
      for (float& v : row) v = 0.0f;
  }
  __device__ void multiply(const float* a, int lda, const float* b, int ldb) {
    const int tr = static_cast<int>(threadIdx.x) / 8, tc = static_cast<int>(threadIdx.x) % 8;
    for (int k = 0; k < kBK; ++k) {
      float av[4], bv[8];
      for (int i = 0; i < 4; ++i) {
        const int m = tr + 16 * i;
        av[i] = kARowMajor ? a[m * lda + k] : a[k * lda + m];
      }
      for (int j = 0; j < 8; ++j) {
        const int n = tc + 8 * j;
        bv[j] = kBRowMajor ? b[k * ldb + n] : b[n * ldb + k];
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
  __device__ void store(float* c) {
    const int tr = static_cast<int>(threadIdx.x) / 8, tc = static_cast<int>(threadIdx.x) % 8;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j) c[(tr + 16 * i) * kLdC + tc + 8 * j] = acc[i][j];
  }
};

__device__ inline std::int64_t clamp64(std::int64_t v, std::int64_t low, std::int64_t high) {
  return v < low ? low : (v > high ? high : v);
}

// Rows [begin, end) of expert e, clamped to [0, rows].
__device__ inline void group_rows(const std::int64_t* offsets, int e, std::int64_t rows,
                                  std::int64_t* begin, std::int64_t* end) {
  *begin = clamp64(offsets[e], 0, rows);
  *end = clamp64(offsets[e + 1], *begin, rows);
}

// out = {expert, first row, end row} of row tile `tile` (expert -1 past the last tile).
__device__ inline void find_row_tile(const std::int64_t* offsets, int experts, std::int64_t rows,
                                     std::int64_t tile, std::int64_t* out) {
  out[0] = -1;
  std::int64_t first_tile = 0;
  for (int e = 0; e < experts; ++e) {
    std::int64_t begin = 0, end = 0;
    group_rows(offsets, e, rows, &begin, &end);
    const std::int64_t tiles = (end - begin + kBM - 1) / kBM;
    if (tile < first_tile + tiles) {
      out[0] = e;
      out[1] = begin + (tile - first_tile) * kBM;
      out[2] = end;
      return;
    }
    first_tile += tiles;
  }
}

// Writes (or adds) the staged 64x64 tile to c [.., ldc] at (row0, col0), rows < row_end and
// columns < cols.
__device__ inline void write_tile(const float* staged, float* c, std::int64_t ldc,
                                  std::int64_t row0, std::int64_t row_end, std::int64_t col0,
                                  std::int64_t cols, bool accumulate) {
  for (int i = threadIdx.x; i < kBM * kBN; i += blockDim.x) {
    const int r = i / kBN, col = i % kBN;
    if (row0 + r >= row_end || col0 + col >= cols) continue;
    float* at = c + (row0 + r) * ldc + col0 + col;
    const float v = staged[r * kLdC + col];
    *at = accumulate ? *at + v : v;
  }
}

template <typename T, bool kBRowMajor>
struct RowsLayout {
  using A = TileLayout<T, kBM, kBK>;
  using B = std::conditional_t<kBRowMajor, TileLayout<T, kBK, kBN>, TileLayout<T, kBN, kBK>>;
  static constexpr int c_offset = A::bytes + B::bytes;
  static constexpr int bytes = c_offset + kBM * kLdC * 4;
};

// c [rows, n] (+)= a [rows, k] · B_e with B_e(kk, n) = w_e[kk * n_dim + n] (row-major, the data
// gradient: w_e is [k, n]) or w_e[n * k_dim + kk] (column-major, the forward: w_e is [n, k]).
// Mode: the operand type in shared memory (T) and B's layout, one parameter so that the launch
// macro sees no comma.
template <typename Operand, bool kBRow, typename AInput = float>
struct RowsMode {
  using T = Operand;
  using A = AInput;  // the row-grouped operand in memory: fp32, or bf16 storage
  static constexpr bool b_row_major = kBRow;
};

template <typename Mode>
__global__ void __launch_bounds__(kThreads)
    grouped_rows_kernel(const std::int64_t* offsets, int experts, std::int64_t rows,
                        const typename Mode::A* a, const float* w, std::int64_t k_dim,
                        std::int64_t n_dim, float* c, bool accumulate) {
  using T = typename Mode::T;
  constexpr bool kBRowMajor = Mode::b_row_major;
  using L = RowsLayout<T, kBRowMajor>;
  __shared__ std::int64_t tile_range[3];
  if (threadIdx.x == 0) find_row_tile(offsets, experts, rows, blockIdx.x, tile_range);
  __syncthreads();
  const std::int64_t e = tile_range[0], row0 = tile_range[1], row_end = tile_range[2];
  if (e < 0) return;
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  T* as = reinterpret_cast<T*>(smem);
  T* bs = reinterpret_cast<T*>(smem + L::A::bytes);
  float* cs = reinterpret_cast<float*>(smem + L::c_offset);
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.y) * kBN;
  const float* w_e = w + e * k_dim * n_dim;
  BlockTile<T, true, kBRowMajor> tile;
  tile.zero();
  for (std::int64_t k0 = 0; k0 < k_dim; k0 += kBK) {
    stage(as, L::A::ld, a + row0 * k_dim + k0, k_dim, row_end - row0, k_dim - k0, kBM, kBK);
    if constexpr (kBRowMajor) {
      stage(bs, L::B::ld, w_e + k0 * n_dim + n0, n_dim, k_dim - k0, n_dim - n0, kBK, kBN);
    } else {
      stage(bs, L::B::ld, w_e + n0 * k_dim + k0, k_dim, n_dim - n0, k_dim - k0, kBN, kBK);
    }
    __syncthreads();
    tile.multiply(as, L::A::ld, bs, L::B::ld);
    __syncthreads();
  }
  tile.store(cs);
  __syncthreads();
  write_tile(cs, c, n_dim, row0, row_end, n0, n_dim, accumulate);
}

template <typename T>
struct WeightGradLayout {
  using A = TileLayout<T, kBK, kBM>;  // dy rows: [k][m], A column-major
  using B = TileLayout<T, kBK, kBN>;  // x rows: [k][n], B row-major
  static constexpr int c_offset = A::bytes + B::bytes;
  static constexpr int bytes = c_offset + kBM * kLdC * 4;
};

// The operand type in shared memory and x's type in memory (fp32, or bf16 storage).
template <typename Operand, typename XInput>
struct WeightGradMode {
  using T = Operand;
  using X = XInput;
};

// dw_e [out, in] += Σ_{r in group e} dy[r]ᵀ x[r]; grid (out tiles x in tiles, experts).
template <typename Mode>
__global__ void __launch_bounds__(kThreads)
    grouped_weight_grad_kernel(const std::int64_t* offsets, std::int64_t rows, const float* dy,
                               const typename Mode::X* x, std::int64_t in, std::int64_t out,
                               float* dw) {
  using T = typename Mode::T;
  using L = WeightGradLayout<T>;
  const int e = static_cast<int>(blockIdx.y);
  std::int64_t begin = 0, end = 0;
  group_rows(offsets, e, rows, &begin, &end);
  if (end <= begin) return;  // the CPU op skips empty groups: dw_e stays bitwise untouched
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  T* as = reinterpret_cast<T*>(smem);
  T* bs = reinterpret_cast<T*>(smem + L::A::bytes);
  float* cs = reinterpret_cast<float*>(smem + L::c_offset);
  const std::int64_t tiles_n = (in + kBN - 1) / kBN;
  const std::int64_t m0 = (blockIdx.x / tiles_n) * kBM, n0 = (blockIdx.x % tiles_n) * kBN;
  BlockTile<T, false, true> tile;
  tile.zero();
  for (std::int64_t r0 = begin; r0 < end; r0 += kBK) {
    stage(as, L::A::ld, dy + r0 * out + m0, out, end - r0, out - m0, kBK, kBM);
    stage(bs, L::B::ld, x + r0 * in + n0, in, end - r0, in - n0, kBK, kBN);
    __syncthreads();
    tile.multiply(as, L::A::ld, bs, L::B::ld);
    __syncthreads();
  }
  tile.store(cs);
  __syncthreads();
  write_tile(cs, dw + e * out * in, in, m0, out, n0, in, /*accumulate=*/true);
}

unsigned tiles(std::int64_t n, int tile) {
  return static_cast<unsigned>((n + tile - 1) / tile);
}

template <typename T, bool kBRowMajor, typename A>
void launch_rows(const GroupedGemmShape& s, const A* a, const float* w, std::int64_t k_dim,
                 std::int64_t n_dim, float* c, bool accumulate, cudaStream_t stream) {
  if (s.rows == 0 || n_dim == 0 || s.experts == 0) return;
  // Σ_e ceil(rows_e / 64) <= floor(rows / 64) + E tiles.
  const dim3 grid(tiles(s.rows, kBM) + static_cast<unsigned>(s.experts), tiles(n_dim, kBN));
  using Mode = RowsMode<T, kBRowMajor, A>;
  constexpr int shared_bytes = RowsLayout<T, kBRowMajor>::bytes;
  DYNCP_LAUNCH(grouped_rows_kernel<Mode>, grid, kThreads, shared_bytes, stream)
  (s.offsets, s.experts, s.rows, a, w, k_dim, n_dim, c, accumulate);
  DYNCP_CUDA_CHECK_LAUNCH();
}

template <typename T, typename X>
void launch_weight_grad(const GroupedGemmShape& s, const float* dy, const X* x, float* dw,
                        cudaStream_t stream) {
  if (s.rows == 0 || s.in == 0 || s.out == 0 || s.experts == 0) return;
  const dim3 grid(tiles(s.out, kBM) * tiles(s.in, kBN), static_cast<unsigned>(s.experts));
  using Mode = WeightGradMode<T, X>;
  DYNCP_LAUNCH(grouped_weight_grad_kernel<Mode>, grid, kThreads, WeightGradLayout<T>::bytes, stream)
  (s.offsets, s.rows, dy, x, s.in, s.out, dw);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void check_shape(const GroupedGemmShape& s, const char* op) {
  if (s.experts < 0 || s.experts > 65535) {
    core::throw_runtime_error(std::string("kernels::") + op + ": " + std::to_string(s.experts) +
                              " experts; the grouped kernels take up to 65535");
  }
}

}  // namespace

void grouped_gemm_forward(const GroupedGemmShape& shape, const float* x, const float* w, float* y,
                          cudaStream_t stream) {
  check_shape(shape, "grouped_gemm_forward");
  if (shape.bf16_products) {
    launch_rows<bf16, false>(shape, x, w, shape.in, shape.out, y, false, stream);
  } else {
    launch_rows<float, false>(shape, x, w, shape.in, shape.out, y, false, stream);
  }
}

void grouped_gemm_forward(const GroupedGemmShape& shape, const bf16* x, const float* w, float* y,
                          cudaStream_t stream) {
  check_shape(shape, "grouped_gemm_forward");
  if (!shape.bf16_products)
    core::throw_runtime_error("kernels::grouped_gemm_forward: bf16 rows need bf16 products");
  launch_rows<bf16, false>(shape, x, w, shape.in, shape.out, y, false, stream);
}

void grouped_gemm_data_grad(const GroupedGemmShape& shape, const float* dy, const float* w,
                            float* dx, bool accumulate, cudaStream_t stream) {
  check_shape(shape, "grouped_gemm_data_grad");
  if (shape.bf16_products) {
    launch_rows<bf16, true>(shape, dy, w, shape.out, shape.in, dx, accumulate, stream);
  } else {
    launch_rows<float, true>(shape, dy, w, shape.out, shape.in, dx, accumulate, stream);
  }
}

void grouped_gemm_weight_grad(const GroupedGemmShape& shape, const float* dy, const float* x,
                              float* dw, cudaStream_t stream) {
  check_shape(shape, "grouped_gemm_weight_grad");
  if (shape.bf16_products) {
    launch_weight_grad<bf16>(shape, dy, x, dw, stream);
  } else {
    launch_weight_grad<float>(shape, dy, x, dw, stream);
  }
}

void grouped_gemm_weight_grad(const GroupedGemmShape& shape, const float* dy, const bf16* x,
                              float* dw, cudaStream_t stream) {
  check_shape(shape, "grouped_gemm_weight_grad");
  if (!shape.bf16_products)
    core::throw_runtime_error("kernels::grouped_gemm_weight_grad: bf16 rows need bf16 products");
  launch_weight_grad<bf16>(shape, dy, x, dw, stream);
}

}  // namespace dyncp::kernels
