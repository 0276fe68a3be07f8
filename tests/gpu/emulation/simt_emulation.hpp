#pragma once
// Runs CUDA kernel source on the host, one std::thread per CUDA thread, so the attention
// kernels' index arithmetic, masks, barriers and tile bookkeeping can be checked on a machine
// without a GPU. Include the real CUDA headers first; this file then redefines the device-only
// keywords and provides __syncthreads, warp shuffles, atomics and a WMMA stand-in (each lane
// computes the whole 16x16 fragment; lane 0 stores it). Slow: small shapes only. It checks the
// kernel's logic, not the hardware's WMMA fragment layout or the compiler.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <barrier>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace simt {

struct ThreadState {
  uint3 thread_idx{}, block_idx{};
  dim3 block_dim{}, grid_dim{};
};
inline thread_local ThreadState self;

struct BlockState {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> exchange;  // one slot per thread for the shuffles
};
inline BlockState* block_state = nullptr;
inline std::mutex atomic_mutex;

inline void sync_block() {
  block_state->block->arrive_and_wait();
}
inline void sync_warp() {
  block_state->warps[self.thread_idx.x / 32]->arrive_and_wait();
}

inline float shfl_xor(float value, int offset) {
  const unsigned lane = self.thread_idx.x % 32, base = self.thread_idx.x - lane;
  float* slot = block_state->exchange.data();
  slot[self.thread_idx.x] = value;
  sync_warp();
  const float result = slot[base + (lane ^ static_cast<unsigned>(offset))];
  sync_warp();
  return result;
}

// WMMA's operand rules: 32-byte aligned tile pointers, leading dimensions in 16-byte steps.
inline void check_operand(const void* p, unsigned ld, std::size_t element, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0 || (ld * element) % 16 != 0) {
    std::fprintf(stderr, "simt: %s operand %p with ld %u breaks WMMA's alignment rules\n", what, p,
                 ld);
    std::abort();
  }
}

// Launches body() once per thread of every block, blocks one after another.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        BlockState state;
        state.block = std::make_unique<std::barrier<>>(threads);
        for (unsigned w = 0; w < (threads + 31) / 32; ++w)
          state.warps.push_back(std::make_unique<std::barrier<>>(32));
        state.exchange.assign(threads, 0.0f);
        block_state = &state;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            self.thread_idx = {t, 0, 0};
            self.block_idx = {x, y, z};
            self.block_dim = block;
            self.grid_dim = grid;
            body();
          });
        }
        for (auto& thread : pool) thread.join();
        block_state = nullptr;
      }
    }
  }
}

}  // namespace simt

// Device keywords become plain C++.
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__
#undef __launch_bounds__
#define __launch_bounds__(...)
#define threadIdx (simt::self.thread_idx)
#define blockIdx (simt::self.block_idx)
#define blockDim (simt::self.block_dim)
#define gridDim (simt::self.grid_dim)
#define __syncthreads() simt::sync_block()
#define __shfl_xor_sync(mask, value, offset) simt::shfl_xor((value), (offset))

inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int atomicMin(int* at, int value) {
  std::lock_guard lock(simt::atomic_mutex);
  const int old = *at;
  *at = old < value ? old : value;
  return old;
}
inline int atomicMax(int* at, int value) {
  std::lock_guard lock(simt::atomic_mutex);
  const int old = *at;
  *at = old > value ? old : value;
  return old;
}
inline float atomicAdd(float* at, float value) {
  std::lock_guard lock(simt::atomic_mutex);
  const float old = *at;
  *at = old + value;
  return old;
}

// WMMA stand-in with the documented element placement of each layout.
namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  float x[16][16];
};

inline float to_float(float value) {
  return value;
}
inline float to_float(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  simt::check_operand(p, ld, sizeof(T), "load");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] = to_float(std::is_same_v<Layout, col_major> ? p[j * ld + i] : p[i * ld + j]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ld, layout_t layout) {
  simt::check_operand(p, ld, sizeof(float), "accumulator load");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] = layout == mem_row_major ? p[i * ld + j] : p[j * ld + i];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float value) {
  for (auto& row : f.x)
    for (float& v : row) v = value;
}
template <typename TA, typename LA, typename TB, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  fragment<accumulator, 16, 16, 16, float> r;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float sum = c.x[i][j];
      for (int k = 0; k < 16; ++k) sum += a.x[i][k] * b.x[k][j];
      r.x[i][j] = sum;
    }
  }
  d = r;
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t layout) {
  simt::check_operand(p, ld, sizeof(float), "store");
  simt::sync_warp();  // every lane has loaded what this store may overwrite
  if (threadIdx.x % 32 == 0) {
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j)
        (layout == mem_row_major ? p[i * ld + j] : p[j * ld + i]) = f.x[i][j];
  }
  simt::sync_warp();
}
}  // namespace nvcuda::wmma
