// The state algebra of DeltaNet context parallelism by state passing (ops/segment_states.hpp)
// and the two layout moves its seam needs (column blocks, an identity block). The compose
// kernels give one block to each (walk, value head): it walks the segments in order, one
// barrier per step, with the running state in double (scratch) and each element's sum in the
// CPU op's order.
#include "common.cuh"
#include "hybrid.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;

constexpr int kWalkBlock = 128;

// suffix = false: S <- F + P S;  suffix = true: dS <- G + Pᵀ dS.
__global__ void compose_kernel(SegmentWalks w, const float* transitions, const float* state_grads,
                               float* out, double* scratch, bool suffix) {
  const std::int64_t walk = blockIdx.x / w.heads, h = blockIdx.x % w.heads;
  const std::int64_t dk = w.key_dim, dv = w.value_dim, width = dv + dk, per_head = dk * dv;
  double* state = scratch + blockIdx.x * 2 * per_head;
  double* next = state + per_head;
  for (std::int64_t e = threadIdx.x; e < per_head; e += blockDim.x) state[e] = 0.0;
  __syncthreads();
  for (std::int64_t i = w.offsets[walk]; i < w.offsets[walk + 1]; ++i) {
    const std::int64_t g = w.segments[i];
    if (g >= w.first_own && g < w.end_own) {
      float* dst = out + ((g - w.first_own) * w.heads + h) * per_head;
      for (std::int64_t e = threadIdx.x; e < per_head; e += blockDim.x)
        dst[e] = static_cast<float>(state[e]);
    }
    if (i + 1 == w.offsets[walk + 1]) break;
    const float* fp = transitions + (g * w.heads + h) * dk * width;
    for (std::int64_t e = threadIdx.x; e < per_head; e += blockDim.x) {
      const std::int64_t row = e / dv, col = e % dv;
      double sum;
      if (suffix) {
        sum = state_grads[(g * w.heads + h) * per_head + e];
        for (std::int64_t a = 0; a < dk; ++a)
          sum += static_cast<double>(fp[a * width + dv + row]) * state[a * dv + col];
      } else {
        sum = fp[row * width + col];
        for (std::int64_t b = 0; b < dk; ++b)
          sum += static_cast<double>(fp[row * width + dv + b]) * state[b * dv + col];
      }
      next[e] = sum;
    }
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < per_head; e += blockDim.x) state[e] = next[e];
    __syncthreads();
  }
}

// Block per (segment, head), thread per state element.
__global__ void segment_state_grads_kernel(const float* query_maps, const float* dout,
                                           const std::int32_t* cu, float* grads, std::int64_t heads,
                                           std::int64_t dk, std::int64_t dv) {
  const std::int64_t s = blockIdx.x / heads, h = blockIdx.x % heads;
  for (std::int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) {
    const std::int64_t b = e / dv, col = e % dv;
    double sum = 0;
    for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t)
      sum += static_cast<double>(query_maps[(t * heads + h) * dk + b]) *
             dout[(t * heads + h) * dv + col];
    grads[(s * heads + h) * dk * dv + e] = static_cast<float>(sum);
  }
}

__global__ void copy_columns_kernel(const float* src, std::int64_t ld_src, float* dst,
                                    std::int64_t ld_dst, std::int64_t rows, std::int64_t width) {
  const std::int64_t n = rows * width;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / width, j = i % width;
    dst[r * ld_dst + j] = src[r * ld_src + j];
  }
}

__global__ void identity_kernel(float* t, std::int64_t n, std::int64_t dk, std::int64_t width,
                                std::int64_t col) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n * dk;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t a = i % dk;
    t[i * width + col + a] = 1.0f;
  }
}

void compose(const SegmentWalks& walks, const float* transitions, const float* state_grads,
             float* out, double* scratch, bool suffix, cudaStream_t stream) {
  if (walks.count * walks.heads == 0) return;
  DYNCP_LAUNCH(compose_kernel, static_cast<unsigned>(walks.count * walks.heads), kWalkBlock, 0,
               stream)
  (walks, transitions, state_grads, out, scratch, suffix);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::int64_t segment_walk_scratch(const SegmentWalks& walks) {
  return walks.count * walks.heads * 2 * walks.key_dim * walks.value_dim + 1;
}

void compose_segment_prefixes(const SegmentWalks& walks, const float* transitions,
                              float* initial_states, double* scratch, cudaStream_t stream) {
  compose(walks, transitions, nullptr, initial_states, scratch, false, stream);
}

void compose_segment_suffixes(const SegmentWalks& walks, const float* transitions,
                              const float* state_grads, float* final_grads, double* scratch,
                              cudaStream_t stream) {
  compose(walks, transitions, state_grads, final_grads, scratch, true, stream);
}

void segment_state_grads(const float* query_maps, const float* dout, const std::int32_t* cu_seqlens,
                         float* grads, std::int64_t segments, std::int64_t heads,
                         std::int64_t key_dim, std::int64_t value_dim, cudaStream_t stream) {
  if (segments * heads == 0) return;
  DYNCP_LAUNCH(segment_state_grads_kernel, static_cast<unsigned>(segments * heads), kWalkBlock, 0,
               stream)
  (query_maps, dout, cu_seqlens, grads, heads, key_dim, value_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void copy_columns(const float* src, std::int64_t ld_src, float* dst, std::int64_t ld_dst,
                  std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  if (rows * width == 0) return;
  DYNCP_LAUNCH(copy_columns_kernel, grid_for(rows * width), kBlock, 0, stream)
  (src, ld_src, dst, ld_dst, rows, width);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void set_identity_columns(float* t, std::int64_t n, std::int64_t dk, std::int64_t width,
                          std::int64_t col, cudaStream_t stream) {
  if (n * dk == 0) return;
  DYNCP_LAUNCH(identity_kernel, grid_for(n * dk), kBlock, 0, stream)(t, n, dk, width, col);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
