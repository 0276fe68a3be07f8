#pragma once
// Small device helpers shared by the kernels (internal to kernels/).

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda_check.hpp"
#include "launch.cuh"

namespace dyncp::kernels::detail {

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n items; capped so a huge n still launches.
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  const std::int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// The logistic function as the CPU ops write it (1 / (1 + e^−a), fp32).
__device__ inline float sigmoid(float a) {
  return 1.0f / (1.0f + expf(-a));
}

template <typename T>
__device__ inline T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 values of T; the call ends with a barrier, so `shared` may be reused.
template <typename T>
__device__ inline T block_sum(T value, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_sum(value);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

}  // namespace dyncp::kernels::detail
