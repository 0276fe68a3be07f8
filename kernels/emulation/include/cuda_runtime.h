#pragma once
// Emulated CUDA: the runtime API plus the device-side language, mapped onto the SIMT executor
// so kernels/ compiles as host C++ (docs/cuda.md, "Emulated backend").

#include <cmath>
#include <cstdint>
#include <mutex>

#include "../simt.hpp"
#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Statics are shared by every thread of the one block that runs at a time: CUDA's block scope.
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

#define threadIdx (::dyncp::emulation::current_thread().thread_idx)
#define blockIdx (::dyncp::emulation::current_thread().block_idx)
#define blockDim (::dyncp::emulation::current_thread().block_dim)
#define gridDim (::dyncp::emulation::current_thread().grid_dim)
#define __syncthreads() ::dyncp::emulation::sync_block()
#define __syncwarp(...) ::dyncp::emulation::sync_warp()
#define __shfl_xor_sync(mask, value, offset) ::dyncp::emulation::shfl_xor((value), (offset))
// extern __shared__ T name[] has no host spelling; kernels declare dynamic shared memory with
// this macro in both builds.
#define DYNCP_DYNAMIC_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::dyncp::emulation::dynamic_shared_memory())

inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
// IEEE single operations rounded to nearest even, one at a time: kernels spell them out where
// a result must equal the CPU's bit for bit (nvcc would otherwise fuse a * b + c). On the host
// each is already one rounded operation.
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline std::int64_t min(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}
inline std::int64_t max(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}

// One fiber runs at a time, so read-modify-write is atomic by construction.
template <typename T>
T atomicAdd(T* at, T value) {
  const T old = *at;
  *at = old + value;
  return old;
}
template <typename T>
T atomicMin(T* at, T value) {
  const T old = *at;
  *at = old < value ? old : value;
  return old;
}
template <typename T>
T atomicMax(T* at, T value) {
  const T old = *at;
  *at = old > value ? old : value;
  return old;
}
