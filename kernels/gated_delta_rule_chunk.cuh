#pragma once
// Device pieces shared by the chunked gated delta rule's kernels (internal to kernels/): the
// block-wide matrix product every chunk step is made of, the chunk geometry of a packed bin,
// and the per-token layout of what the prepare kernel leaves for the others.
//
// block_mm runs on tensor cores (nvcuda::wmma 16x16x16, bf16 operands rounded while they are
// staged into shared memory, fp32 accumulators) or, for fp32 runs, as plain fp32 sums in the
// order of the shared dimension, one output element per thread. Operands are read through a
// (pointer, leading dimension, transposed) view from global or shared memory, so no caller
// materialises a transpose; logical sizes need not be multiples of 16 (staging pads with
// zeros).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "common.cuh"
#include "hybrid.hpp"
#include "ops/gated_delta_rule_scratch.hpp"

namespace dyncp::kernels::chunked_detail {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunk = 64;  // C <= 64: a chunk's C×C matrices are one staged tile
constexpr int kTile = 64;      // block_mm's output block and shared-dimension panel
constexpr int kColumns = 32;   // state columns per block of the serial kernels
constexpr int kLdBf16 = kTile + 8;
constexpr int kLdF32 = kTile + 4;
constexpr int kLdSquare = kMaxChunk;  // C×C matrices in shared memory

// Element (r, c) of a logical matrix: p[r * ld + c], or p[c * ld + r] when transposed.
struct View {
  const float* p;
  std::int64_t ld;
  bool t;
  __device__ float at(std::int64_t r, std::int64_t c) const {
    return t ? p[c * ld + r] : p[r * ld + c];
  }
};

__device__ inline View rows(const float* p, std::int64_t ld) {
  return {p, ld, false};
}
__device__ inline View transposed(const float* p, std::int64_t ld) {
  return {p, ld, true};
}

// The staging buffers of the tensor-core path (shared memory, 128-byte aligned).
struct Staging {
  bf16 *a, *b, *a_low, *b_low;  // [kTile][kLdBf16]
  float* c;                     // [kTile][kLdF32]
};

// Bytes of the staging buffers, rounded to 128.
constexpr std::size_t staging_bytes() {
  return 4 * ((sizeof(bf16) * kTile * kLdBf16 + 127) / 128 * 128) +
         (sizeof(float) * kTile * kLdF32 + 127) / 128 * 128;
}

// Carves a dynamic shared-memory buffer into 128-byte aligned regions.
struct Carve {
  unsigned char* base;
  std::size_t offset = 0;
  template <typename T>
  __host__ __device__ T* take(std::size_t count) {
    T* at = reinterpret_cast<T*>(base + offset);
    offset = (offset + sizeof(T) * count + 127) / 128 * 128;
    return at;
  }
};

__device__ inline Staging take_staging(Carve& carve) {
  Staging st;
  st.a = carve.take<bf16>(kTile * kLdBf16);
  st.b = carve.take<bf16>(kTile * kLdBf16);
  st.a_low = carve.take<bf16>(kTile * kLdBf16);
  st.b_low = carve.take<bf16>(kTile * kLdBf16);
  st.c = carve.take<float>(kTile * kLdF32);
  return st;
}

// One 64×64 output block of the tensor-core path: panels of 64 along the shared dimension.
__device__ inline void mm_block_tc(float* d, std::int64_t ldd, View a, View b, int r0, int c0,
                                   int mt, int nt, int k, float alpha, bool accumulate,
                                   const Staging& st) {
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  const int warp = threadIdx.x / 32, tiles_n = (nt + 15) / 16, tiles = ((mt + 15) / 16) * tiles_n;
  Acc acc[kTile * kTile / 256 / kWarps];
  for (int f = 0; f < kTile * kTile / 256 / kWarps; ++f) wmma::fill_fragment(acc[f], 0.0f);
  for (int k0 = 0; k0 < k; k0 += kTile) {
    const int kt = k - k0 < kTile ? k - k0 : kTile;
    for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
      const int r = i / kTile, c = i % kTile;
      const float av = r < mt && c < kt ? alpha * a.at(r0 + r, k0 + c) : 0.0f;
      const float bv = r < kt && c < nt ? b.at(k0 + r, c0 + c) : 0.0f;
      const bf16 a_high = __float2bfloat16(av), b_high = __float2bfloat16(bv);
      st.a[r * kLdBf16 + c] = a_high;
      st.b[r * kLdBf16 + c] = b_high;
      st.a_low[r * kLdBf16 + c] = __float2bfloat16(av - __bfloat162float(a_high));
      st.b_low[r * kLdBf16 + c] = __float2bfloat16(bv - __bfloat162float(b_high));
    }
    __syncthreads();
    const int panels = (kt + 15) / 16;
    for (int f = 0; f < kTile * kTile / 256 / kWarps; ++f) {
      const int tile = warp + f * kWarps;
      if (tile < tiles) {
        const int tm = tile / tiles_n, tn = tile % tiles_n;
        for (int kk = 0; kk < panels; ++kk) {
          // a·b ≈ a_low·b + a·b_low + a·b (the small terms first); a_low·b_low is below
          // fp32's rounding of the sum.
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa, fa_low;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb, fb_low;
          const int at_a = tm * 16 * kLdBf16 + kk * 16, at_b = kk * 16 * kLdBf16 + tn * 16;
          wmma::load_matrix_sync(fa, st.a + at_a, kLdBf16);
          wmma::load_matrix_sync(fa_low, st.a_low + at_a, kLdBf16);
          wmma::load_matrix_sync(fb, st.b + at_b, kLdBf16);
          wmma::load_matrix_sync(fb_low, st.b_low + at_b, kLdBf16);
          wmma::mma_sync(acc[f], fa_low, fb, acc[f]);
          wmma::mma_sync(acc[f], fa, fb_low, acc[f]);
          wmma::mma_sync(acc[f], fa, fb, acc[f]);
        }
      }
    }
    __syncthreads();
  }
  for (int f = 0; f < kTile * kTile / 256 / kWarps; ++f) {
    const int tile = warp + f * kWarps;
    if (tile < tiles) {
      const int tm = tile / tiles_n, tn = tile % tiles_n;
      wmma::store_matrix_sync(st.c + tm * 16 * kLdF32 + tn * 16, acc[f], kLdF32,
                              wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < mt * nt; i += blockDim.x) {
    const int r = i / nt, c = i % nt;
    float* out = d + (r0 + r) * ldd + c0 + c;
    *out = (accumulate ? *out : 0.0f) + st.c[r * kLdF32 + c];
  }
  __syncthreads();
}

// d[m×n] (row-major, ldd) = (accumulate ? d : 0) + alpha · A[m×k] · B[k×n]. Every thread of
// the block calls it; it ends with a barrier. d must not overlap A or B.
__device__ inline void block_mm(float* d, std::int64_t ldd, View a, View b, int m, int n, int k,
                                float alpha, bool accumulate, bool tensor_cores,
                                const Staging& st) {
  if (tensor_cores) {
    for (int r0 = 0; r0 < m; r0 += kTile) {
      for (int c0 = 0; c0 < n; c0 += kTile) {
        mm_block_tc(d, ldd, a, b, r0, c0, m - r0 < kTile ? m - r0 : kTile,
                    n - c0 < kTile ? n - c0 : kTile, k, alpha, accumulate, st);
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < m * n; i += blockDim.x) {
    const int r = i / n, c = i % n;
    float sum = 0;
    for (int x = 0; x < k; ++x) sum += a.at(r, x) * b.at(x, c);
    float* out = d + r * ldd + c;
    *out = accumulate ? *out + alpha * sum : alpha * sum;
  }
  __syncthreads();
}

// One chunk of a packed bin: its sequence, first token and length.
struct ChunkAt {
  std::int64_t s, t0;
  int c;
};

// Chunk gc (chunks numbered in sequence order, first_chunk[s] the first of sequence s): the
// largest s with first_chunk[s] <= gc is its sequence (an empty sequence's successor starts
// at the same index, so the search never lands on an empty one).
__device__ inline ChunkAt chunk_at(const GatedDeltaRuleArgs& a, std::int64_t gc) {
  std::int64_t low = 0, high = a.sequences - 1;
  while (low < high) {
    const std::int64_t mid = (low + high + 1) / 2;
    if (a.first_chunk[mid] <= gc) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  const std::int64_t t0 = a.cu_seqlens[low] + (gc - a.first_chunk[low]) * a.chunk;
  const std::int64_t left = a.cu_seqlens[low + 1] - t0;
  return {low, t0, static_cast<int>(left < a.chunk ? left : a.chunk)};
}

// What the prepare kernel leaves, per token and value head (rows of chunk gc are its tokens):
// γ (the in-chunk cumulative log decay), W = L⁻¹ β e^γ K, U = L⁻¹ β V (forward only: the
// backward's chunk kernel recomputes it) and M = Q̃ Kᵀ ⊙ Γ, a C×C matrix as C floats per token.
struct Prepared {
  float *gamma, *w, *u, *m;
};

inline std::int64_t prepared_floats(const GatedDeltaRuleArgs& a, bool backward) {
  return ops::gated_delta_rule_chunked_prepared_floats(
      {a.sequences, a.value_heads, a.key_dim, a.value_dim, a.chunk}, a.tokens, backward);
}

inline Prepared prepared_at(const GatedDeltaRuleArgs& a, float* scratch, bool backward) {
  const std::int64_t rows = a.tokens * a.value_heads;
  Prepared p{};
  p.gamma = scratch;
  p.w = p.gamma + rows;
  p.u = backward ? nullptr : p.w + rows * a.key_dim;
  p.m = p.w + rows * (a.key_dim + (backward ? 0 : a.value_dim));
  return p;
}

// One chunk's preparation in shared memory: γ, β and the C×C matrices K Kᵀ ⊙ Γ (strict
// lower), T = L⁻¹ and a work square; left for the caller.
struct PrepareSmem {
  float *gamma, *beta, *kkg, *inverse, *weights;
};

constexpr std::size_t kPrepareSmemBytes = 2 * 256 + 3 * sizeof(float) * kMaxChunk * kLdSquare;

__device__ inline PrepareSmem take_prepare(Carve& carve) {
  PrepareSmem sm;
  sm.gamma = carve.take<float>(kMaxChunk);
  sm.beta = carve.take<float>(kMaxChunk);
  sm.kkg = carve.take<float>(kMaxChunk * kLdSquare);
  sm.inverse = carve.take<float>(kMaxChunk * kLdSquare);
  sm.weights = carve.take<float>(kMaxChunk * kLdSquare);
  return sm;
}

// Where the preparation stores its rows (each may be null: not computed); row t of the chunk
// at p + t * ld.
struct PrepareOut {
  float* gamma;
  std::int64_t gamma_ld;
  float *u, *w, *m;
  std::int64_t u_ld, w_ld, m_ld;
};

// Writes row t, columns [0, C), of a chunk's C×C matrix `m` (c×c live) to per-token storage.
__device__ inline void store_square(float* dst, std::int64_t ld, const float* m, int c, int C) {
  for (int i = threadIdx.x; i < c * C; i += blockDim.x) {
    const int t = i / C, s = i % C;
    dst[t * ld + s] = s < c ? m[t * kLdSquare + s] : 0.0f;
  }
}

// γ, K Kᵀ ⊙ Γ, T = (I + β K Kᵀ ⊙ Γ)⁻¹ (column j solves (I + A) x = e_j by forward
// substitution: the columns of a unit lower triangular inverse are independent, one thread
// each), then U = T β V, W = T β e^γ K and M = Q̃ Kᵀ ⊙ Γ as block products.
__device__ inline void prepare_chunk(const GatedDeltaRuleArgs& a, const ChunkAt& at, std::int64_t h,
                                     const PrepareOut& o, const PrepareSmem& sm,
                                     const Staging& st) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim;
  const int c = at.c, C = a.chunk, ld = kLdSquare, ik = static_cast<int>(dk);
  const bool tc = a.tensor_cores;
  const std::int64_t qk_ld = a.key_heads * dk, row0 = at.t0 * hv + h;
  const std::int64_t kh = h / (hv / a.key_heads);
  const float* k_rows = a.k + (at.t0 * a.key_heads + kh) * dk;
  const float* q_rows = a.q + (at.t0 * a.key_heads + kh) * dk;
  float *gamma = sm.gamma, *beta = sm.beta, *kkg = sm.kkg, *inverse = sm.inverse,
        *weights = sm.weights;
  if (threadIdx.x == 0) {
    float running = 0;
    for (int t = 0; t < c; ++t) {
      running += a.g[row0 + t * hv];
      gamma[t] = running;
    }
  }
  for (int t = threadIdx.x; t < c; t += blockDim.x) beta[t] = a.beta[row0 + t * hv];
  __syncthreads();
  if (o.gamma != nullptr) {
    for (int t = threadIdx.x; t < c; t += blockDim.x) o.gamma[t * o.gamma_ld] = gamma[t];
  }
  block_mm(kkg, ld, rows(k_rows, qk_ld), transposed(k_rows, qk_ld), c, c, ik, 1.0f, false, tc, st);
  for (int i = threadIdx.x; i < c * c; i += blockDim.x) {
    const int t = i / c, s = i % c;
    kkg[t * ld + s] = s < t ? kkg[t * ld + s] * expf(gamma[t] - gamma[s]) : 0.0f;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    for (int t = 0; t < c; ++t) {
      float x = t == j ? 1.0f : 0.0f;
      for (int s = j; s < t; ++s) x -= beta[t] * kkg[t * ld + s] * inverse[s * ld + j];
      inverse[t * ld + j] = x;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < c * c; i += blockDim.x) {
    const int t = i / c, s = i % c;
    weights[t * ld + s] = inverse[t * ld + s] * beta[s];
  }
  __syncthreads();
  if (o.u != nullptr) {
    block_mm(o.u, o.u_ld, rows(weights, ld), rows(a.v + row0 * dv, hv * dv), c,
             static_cast<int>(dv), c, 1.0f, false, tc, st);
  }
  if (o.w != nullptr) {
    for (int i = threadIdx.x; i < c * c; i += blockDim.x) {
      const int t = i / c, s = i % c;
      weights[t * ld + s] *= expf(gamma[s]);
    }
    __syncthreads();
    block_mm(o.w, o.w_ld, rows(weights, ld), rows(k_rows, qk_ld), c, ik, c, 1.0f, false, tc, st);
  }
  if (o.m != nullptr) {
    block_mm(weights, ld, rows(q_rows, qk_ld), transposed(k_rows, qk_ld), c, c, ik, a.scale, false,
             tc, st);
    for (int i = threadIdx.x; i < c * c; i += blockDim.x) {
      const int t = i / c, s = i % c;
      weights[t * ld + s] = s <= t ? weights[t * ld + s] * expf(gamma[t] - gamma[s]) : 0.0f;
    }
    __syncthreads();
    store_square(o.m, o.m_ld, weights, c, C);
  }
  __syncthreads();
}

// prepare_chunk for every chunk and value head, in parallel (gated_delta_rule_chunked.cu),
// storing what `p` holds (U only when p.u is set).
void launch_prepare(const GatedDeltaRuleArgs& a, const Prepared& p, cudaStream_t stream);
// Refuses (core::Error naming op) a chunk or key dim outside the kernels' limits.
void check_chunked(const GatedDeltaRuleArgs& a, const char* op);
// Blocks of kColumns state columns per (sequence, value head) in the serial kernels.
std::int64_t column_tiles(const GatedDeltaRuleArgs& a);
// Shared memory of a serial kernel: staging, a dk×kColumns state and column_buffers C×kColumns.
std::size_t serial_shared_bytes(const GatedDeltaRuleArgs& a, int column_buffers);

}  // namespace dyncp::kernels::chunked_detail
