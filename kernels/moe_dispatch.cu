// Fused MoE dispatch (kernels/moe_dispatch.hpp). Deterministic: counts are exact integers and
// every placement follows assignment order, so no atomic order shows in any output.
#include <string>

#include "common.cuh"
#include "moe_dispatch.hpp"
#include "router_row.cuh"

namespace dyncp::kernels {
namespace {

constexpr int kTokensPerBlock = 128;
constexpr int kPlaceThreads = 256;
constexpr int kMaxExperts = 4096, kMaxTopK = 32;

// block_counts[b][e]: assignments of block b's tokens to expert e.
__global__ void route_count_kernel(const float* logits, std::int64_t tokens, int experts, int top_k,
                                   bool normalize, std::int32_t* ids, float* weights, float* probs,
                                   std::int64_t* block_counts) {
  DYNCP_DYNAMIC_SHARED(int, counts);  // experts
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kTokensPerBlock + threadIdx.x;
  if (t < tokens) {
    detail::route_token(logits + t * experts, probs + t * experts, experts, top_k, normalize,
                        ids + t * top_k, weights + t * top_k);
    for (int j = 0; j < top_k; ++j) atomicAdd(&counts[ids[t * top_k + j]], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    block_counts[static_cast<std::int64_t>(blockIdx.x) * experts + e] = counts[e];
}

// One block: offsets [E + 1] and block_counts turned into each (block, expert)'s first row.
__global__ void dispatch_scan_kernel(std::int64_t* block_counts, int blocks, int experts,
                                     std::int64_t* offsets) {
  DYNCP_DYNAMIC_SHARED(long long, start);  // experts
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    long long running = 0;
    for (int b = 0; b < blocks; ++b) {
      std::int64_t& c = block_counts[static_cast<std::int64_t>(b) * experts + e];
      const long long count = c;
      c = running;
      running += count;
    }
    start[e] = running;  // the expert's total, for now
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    long long offset = 0;
    for (int e = 0; e < experts; ++e) {
      offsets[e] = offset;
      const long long total = start[e];
      start[e] = offset;
      offset += total;
    }
    offsets[experts] = offset;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    for (int b = 0; b < blocks; ++b)
      block_counts[static_cast<std::int64_t>(b) * experts + e] += start[e];
}

// The block's assignments in order: thread e walks them and numbers expert e's from the
// block's first row for e (stable), then the plan entries and the rows are written.
__global__ void dispatch_place_kernel(const std::int32_t* ids, const float* x,
                                      const std::int64_t* block_first_row, std::int64_t tokens,
                                      int experts, int top_k, std::int64_t hidden,
                                      std::int32_t* order, std::int32_t* assignment_row,
                                      float* x_perm) {
  DYNCP_DYNAMIC_SHARED(int, shared);
  int* block_ids = shared;                             // kTokensPerBlock * top_k
  int* block_rows = shared + kTokensPerBlock * top_k;  // kTokensPerBlock * top_k
  const std::int64_t first_token = static_cast<std::int64_t>(blockIdx.x) * kTokensPerBlock;
  const std::int64_t block_tokens =
      tokens - first_token < kTokensPerBlock ? tokens - first_token : kTokensPerBlock;
  const int n = static_cast<int>(block_tokens) * top_k;
  const std::int64_t first = first_token * top_k;
  for (int i = threadIdx.x; i < n; i += blockDim.x) block_ids[i] = ids[first + i];
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int row =
        static_cast<int>(block_first_row[static_cast<std::int64_t>(blockIdx.x) * experts + e]);
    for (int i = 0; i < n; ++i)
      if (block_ids[i] == e) block_rows[i] = row++;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    order[block_rows[i]] = static_cast<std::int32_t>(first + i);
    assignment_row[first + i] = block_rows[i];
  }
  for (int i = 0; i < n; ++i) {
    const float* src = x + (first_token + i / top_k) * hidden;
    float* dst = x_perm + static_cast<std::int64_t>(block_rows[i]) * hidden;
    for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
  }
}

int blocks_for(std::int64_t tokens) {
  return static_cast<int>((tokens + kTokensPerBlock - 1) / kTokensPerBlock);
}

void check(const DispatchShape& s) {
  if (s.experts < 1 || s.experts > kMaxExperts || s.top_k < 1 || s.top_k > kMaxTopK ||
      s.top_k > s.experts) {
    core::throw_runtime_error("kernels::route_and_permute: " + std::to_string(s.experts) +
                              " experts, top " + std::to_string(s.top_k) +
                              "; the fused dispatch takes 1 to 4096 experts and top_k 1 to 32 "
                              "(set model.moe_permute_fusion: false for more)");
  }
  if (s.tokens * s.top_k > INT32_MAX)
    core::throw_runtime_error("kernels::route_and_permute: more than 2^31 assignments");
}

}  // namespace

std::int64_t route_and_permute_scratch(const DispatchShape& shape) {
  return static_cast<std::int64_t>(blocks_for(shape.tokens)) * shape.experts;
}

void route_and_permute(const DispatchShape& shape, const float* logits, const float* x,
                       std::int32_t* ids, float* weights, float* probs, std::int32_t* order,
                       std::int32_t* assignment_row, std::int64_t* offsets, float* x_perm,
                       std::int64_t* scratch, cudaStream_t stream) {
  check(shape);
  const int blocks = blocks_for(shape.tokens);
  if (blocks == 0) {
    DYNCP_CUDA_CHECK(
        cudaMemsetAsync(offsets, 0, (shape.experts + 1) * sizeof(std::int64_t), stream));
    return;
  }
  DYNCP_LAUNCH(route_count_kernel, static_cast<unsigned>(blocks), kTokensPerBlock,
               shape.experts * sizeof(int), stream)
  (logits, shape.tokens, shape.experts, shape.top_k, shape.normalize_top_k, ids, weights, probs,
   scratch);
  DYNCP_CUDA_CHECK_LAUNCH();
  DYNCP_LAUNCH(dispatch_scan_kernel, 1, 1024, shape.experts * sizeof(long long), stream)
  (scratch, blocks, shape.experts, offsets);
  DYNCP_CUDA_CHECK_LAUNCH();
  DYNCP_LAUNCH(dispatch_place_kernel, static_cast<unsigned>(blocks), kPlaceThreads,
               2 * kTokensPerBlock * shape.top_k * sizeof(int), stream)
  (ids, x, scratch, shape.tokens, shape.experts, shape.top_k, shape.hidden, order, assignment_row,
   x_perm);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
