// Token permutation to experts and back (ops/permute.hpp). Every output row is written by one
// block that sums in slot order, so results are deterministic without atomics.
#include "common.cuh"
#include "ops.hpp"

namespace dyncp::kernels {
namespace {

using detail::kBlock;

// One block. Counts per expert, exclusive scan, then a stable placement: thread e walks the
// assignments in order and places its expert's ones (correctness first: O(E · T·k) reads).
__global__ void permute_plan_kernel(const std::int32_t* ids, std::int64_t n, int experts,
                                    std::int32_t* order, std::int32_t* assignment_row,
                                    std::int64_t* offsets, std::int32_t* bad) {
  DYNCP_DYNAMIC_SHARED(long long, counts);  // experts + 1
  for (int e = threadIdx.x; e <= experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (std::int64_t a = threadIdx.x; a < n; a += blockDim.x) {
    const int e = ids[a];
    if (e >= 0 && e < experts) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&counts[e + 1]), 1ull);
    } else if (bad != nullptr) {
      atomicMin(bad, static_cast<int>(a));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int e = 0; e < experts; ++e) counts[e + 1] += counts[e];
    for (int e = 0; e <= experts; ++e) offsets[e] = counts[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    long long row = counts[e];
    for (std::int64_t a = 0; a < n; ++a) {
      if (ids[a] != e) continue;
      order[row] = static_cast<std::int32_t>(a);
      assignment_row[a] = static_cast<std::int32_t>(row);
      ++row;
    }
  }
}

// x_perm[r] = x[order[r] / k]; one block per permuted row.
__global__ void permute_forward_kernel(const float* x, const std::int32_t* order, float* x_perm,
                                       int top_k, std::int64_t hidden) {
  const std::int64_t r = blockIdx.x, t = order[r] / top_k;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
    x_perm[r * hidden + c] = x[t * hidden + c];
}

// dx[t] (+)= Σ_j dx_perm[assignment_row[t·k + j]]; one block per token.
__global__ void permute_backward_kernel(const float* dx_perm, const std::int32_t* assignment_row,
                                        float* dx, int top_k, std::int64_t hidden,
                                        bool accumulate) {
  const std::int64_t t = blockIdx.x;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum += dx_perm[assignment_row[t * top_k + j] * hidden + c];
    dx[t * hidden + c] = accumulate ? dx[t * hidden + c] + sum : sum;
  }
}

// y[t] = Σ_j w[t, j] · y_perm[assignment_row[t·k + j]]; one block per token.
// y_perm is fp32, or bf16 storage (bf16 activations) read widened.
__device__ inline float widened(float v) {
  return v;
}
__device__ inline float widened(bf16 v) {
  return __bfloat162float(v);
}

template <typename Y>
__global__ void unpermute_forward_kernel(const Y* y_perm, const std::int32_t* assignment_row,
                                         const float* weights, float* y, int top_k,
                                         std::int64_t hidden) {
  const std::int64_t t = blockIdx.x;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j)
      sum += weights[t * top_k + j] * widened(y_perm[assignment_row[t * top_k + j] * hidden + c]);
    y[t * hidden + c] = sum;
  }
}

// One block per assignment: dy_perm[row] = w · dy[t]; dweights[a] = dy[t] · y_perm[row].
template <typename Y>
__global__ void unpermute_backward_kernel(const float* dy, const Y* y_perm,
                                          const std::int32_t* assignment_row, const float* weights,
                                          float* dy_perm, float* dweights, int top_k,
                                          std::int64_t hidden) {
  __shared__ float partial[32];
  const std::int64_t a = blockIdx.x, t = a / top_k, row = assignment_row[a];
  const float w = weights[a];
  float dot = 0.0f;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float g = dy[t * hidden + c];
    dy_perm[row * hidden + c] = w * g;
    dot += g * widened(y_perm[row * hidden + c]);
  }
  dot = detail::block_sum(dot, partial);
  if (threadIdx.x == 0) dweights[a] = dot;
}

}  // namespace

void build_permute_plan(const std::int32_t* expert_ids, std::int64_t assignments, int experts,
                        std::int32_t* expert_order, std::int32_t* assignment_row,
                        std::int64_t* expert_offsets, std::int32_t* bad_assignment,
                        cudaStream_t stream) {
  if (experts < 1 || experts > 1024) {
    core::throw_runtime_error("kernels::build_permute_plan: " + std::to_string(experts) +
                              " experts; this kernel handles 1 to 1024");
  }
  DYNCP_LAUNCH(permute_plan_kernel, 1, 1024, (experts + 1) * sizeof(long long), stream)
  (expert_ids, assignments, experts, expert_order, assignment_row, expert_offsets, bad_assignment);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void permute_forward(const float* x, const std::int32_t* expert_order, float* x_perm,
                     std::int64_t tokens, int top_k, std::int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(permute_forward_kernel, static_cast<unsigned>(tokens * top_k), kBlock, 0, stream)
  (x, expert_order, x_perm, top_k, hidden);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void permute_backward(const float* dx_perm, const std::int32_t* assignment_row, float* dx,
                      std::int64_t tokens, int top_k, std::int64_t hidden, bool accumulate,
                      cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(permute_backward_kernel, static_cast<unsigned>(tokens), kBlock, 0, stream)
  (dx_perm, assignment_row, dx, top_k, hidden, accumulate);
  DYNCP_CUDA_CHECK_LAUNCH();
}

namespace {

template <typename Y>
void launch_unpermute_forward(const Y* y_perm, const std::int32_t* assignment_row,
                              const float* weights, float* y, std::int64_t tokens, int top_k,
                              std::int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(unpermute_forward_kernel<Y>, static_cast<unsigned>(tokens), kBlock, 0, stream)
  (y_perm, assignment_row, weights, y, top_k, hidden);
  DYNCP_CUDA_CHECK_LAUNCH();
}

template <typename Y>
void launch_unpermute_backward(const float* dy, const Y* y_perm, const std::int32_t* assignment_row,
                               const float* weights, float* dy_perm, float* dweights,
                               std::int64_t tokens, int top_k, std::int64_t hidden,
                               cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(unpermute_backward_kernel<Y>, static_cast<unsigned>(tokens * top_k), kBlock, 0,
               stream)
  (dy, y_perm, assignment_row, weights, dy_perm, dweights, top_k, hidden);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void unpermute_forward(const float* y_perm, const std::int32_t* assignment_row,
                       const float* weights, float* y, std::int64_t tokens, int top_k,
                       std::int64_t hidden, cudaStream_t stream) {
  launch_unpermute_forward(y_perm, assignment_row, weights, y, tokens, top_k, hidden, stream);
}

void unpermute_forward(const bf16* y_perm, const std::int32_t* assignment_row, const float* weights,
                       float* y, std::int64_t tokens, int top_k, std::int64_t hidden,
                       cudaStream_t stream) {
  launch_unpermute_forward(y_perm, assignment_row, weights, y, tokens, top_k, hidden, stream);
}

void unpermute_backward(const float* dy, const float* y_perm, const std::int32_t* assignment_row,
                        const float* weights, float* dy_perm, float* dweights, std::int64_t tokens,
                        int top_k, std::int64_t hidden, cudaStream_t stream) {
  launch_unpermute_backward(dy, y_perm, assignment_row, weights, dy_perm, dweights, tokens, top_k,
                            hidden, stream);
}

void unpermute_backward(const float* dy, const bf16* y_perm, const std::int32_t* assignment_row,
                        const float* weights, float* dy_perm, float* dweights, std::int64_t tokens,
                        int top_k, std::int64_t hidden, cudaStream_t stream) {
  launch_unpermute_backward(dy, y_perm, assignment_row, weights, dy_perm, dweights, tokens, top_k,
                            hidden, stream);
}

}  // namespace dyncp::kernels
