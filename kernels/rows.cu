// Row-wise kernels: embedding, RMSNorm, router softmax-top-k.
#include <climits>

#include "common.cuh"
#include "ops.hpp"
#include "router_row.cuh"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;

// One block per token row. The table holds rows [first, first + rows) of a vocabulary of
// `vocab` ids (the whole table: first 0, rows = vocab); an id of another shard gives a zero row.
__global__ void embedding_forward_kernel(const std::int32_t* ids, const float* table, float* out,
                                         std::int64_t first, std::int64_t rows, std::int64_t vocab,
                                         std::int64_t hidden, std::int32_t* bad_token) {
  const std::int64_t t = blockIdx.x;
  const std::int32_t id = ids[t];
  const bool valid = id >= 0 && id < vocab;
  if (!valid && threadIdx.x == 0 && bad_token != nullptr) atomicMin(bad_token, static_cast<int>(t));
  const std::int64_t local = id - first;
  const bool here = valid && local >= 0 && local < rows;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
    out[t * hidden + c] = here ? table[local * hidden + c] : 0.0f;
}

__global__ void embedding_backward_kernel(const std::int32_t* ids, const float* dout, float* dtable,
                                          std::int64_t first, std::int64_t rows, std::int64_t vocab,
                                          std::int64_t hidden, std::int64_t padding_idx) {
  const std::int64_t t = blockIdx.x;
  const std::int32_t id = ids[t];
  const std::int64_t local = id - first;
  if (id < 0 || id >= vocab || id == padding_idx || local < 0 || local >= rows) return;
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
    atomicAdd(&dtable[local * hidden + c], dout[t * hidden + c]);
}

// One block per row: r = 1 / sqrt(mean x² + eps), y = w_eff · x · r.
__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, float* y,
                                       float* inv_rms, std::int64_t n, float eps,
                                       float weight_offset) {
  __shared__ float partial[32];
  const float* row = x + blockIdx.x * n;
  float acc = 0.0f;
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x) acc += row[c] * row[c];
  const float r = rsqrtf(detail::block_sum(acc, partial) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0) inv_rms[blockIdx.x] = r;
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x)
    y[blockIdx.x * n + c] = (weight[c] + weight_offset) * (row[c] * r);
}

// dx = r · (g − x̂ · (x̂·g) / n), g = w_eff ⊙ dy; dw += dy ⊙ x̂ (atomics across rows).
__global__ void rmsnorm_backward_kernel(const float* dy, const float* x, const float* weight,
                                        const float* inv_rms, float* dx, float* dweight,
                                        std::int64_t n, float weight_offset, bool accumulate) {
  __shared__ float partial[32];
  const std::int64_t base = blockIdx.x * n;
  const float r = inv_rms[blockIdx.x];
  float dot = 0.0f;
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x)
    dot += (x[base + c] * r) * ((weight[c] + weight_offset) * dy[base + c]);
  dot = detail::block_sum(dot, partial) / static_cast<float>(n);
  // Each element is read and then written by the same thread, so dx may alias dy or x.
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float xhat = x[base + c] * r, d = dy[base + c];
    if (dweight != nullptr) atomicAdd(&dweight[c], d * xhat);
    const float value = r * ((weight[c] + weight_offset) * d - xhat * dot);
    dx[base + c] = accumulate ? dx[base + c] + value : value;
  }
}

// One thread per token: softmax over E, then k selection passes (largest p, ties to the
// lower index, like the CPU op).
__global__ void router_forward_kernel(const float* logits, std::int64_t tokens, int experts,
                                      int top_k, bool normalize, std::int32_t* ids, float* weights,
                                      float* probs) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    detail::route_token(logits + t * experts, probs + t * experts, experts, top_k, normalize,
                        ids + t * top_k, weights + t * top_k);
  }
}

__global__ void balanced_router_forward_kernel(const float* logits, const std::int32_t* positions,
                                               std::int64_t tokens, int experts, int layer,
                                               int top_k, bool normalize, std::int32_t* ids,
                                               float* weights, float* probs) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    detail::route_token_balanced(logits + t * experts, probs + t * experts, experts, top_k,
                                 normalize, positions[t], layer, ids + t * top_k,
                                 weights + t * top_k);
  }
}

__global__ void router_backward_kernel(const float* dweights, const std::int32_t* ids,
                                       const float* weights, const float* probs,
                                       std::int64_t tokens, int experts, int top_k, bool normalize,
                                       float* dlogits) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const float* dw = dweights + t * top_k;
    const float* w = weights + t * top_k;
    const float* p = probs + t * experts;
    float* dl = dlogits + t * experts;
    const std::int32_t* sel = ids + t * top_k;
    float dot = 0.0f;  // Σ_S w·dw (normalised) or Σ_S p·dw (unnormalised)
    for (int j = 0; j < top_k; ++j) dot += (normalize ? w[j] : p[sel[j]]) * dw[j];
    if (normalize) {
      for (int e = 0; e < experts; ++e) dl[e] = 0.0f;
      for (int j = 0; j < top_k; ++j) dl[sel[j]] = w[j] * (dw[j] - dot);
    } else {
      for (int e = 0; e < experts; ++e) dl[e] = -p[e] * dot;
      for (int j = 0; j < top_k; ++j) dl[sel[j]] += p[sel[j]] * dw[j];
    }
  }
}

}  // namespace

void embedding_forward(const std::int32_t* ids, const float* table, float* out, std::int64_t tokens,
                       std::int64_t vocab, std::int64_t hidden, std::int32_t* bad_token,
                       cudaStream_t stream) {
  embedding_shard_forward(ids, table, out, tokens, 0, vocab, vocab, hidden, bad_token, stream);
}

void embedding_backward(const std::int32_t* ids, const float* dout, float* dtable,
                        std::int64_t tokens, std::int64_t vocab, std::int64_t hidden,
                        std::int64_t padding_idx, cudaStream_t stream) {
  embedding_shard_backward(ids, dout, dtable, tokens, 0, vocab, vocab, hidden, padding_idx, stream);
}

void embedding_shard_forward(const std::int32_t* ids, const float* table, float* out,
                             std::int64_t tokens, std::int64_t first, std::int64_t rows,
                             std::int64_t vocab, std::int64_t hidden, std::int32_t* bad_token,
                             cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(embedding_forward_kernel, static_cast<unsigned>(tokens), kBlock, 0, stream)
  (ids, table, out, first, rows, vocab, hidden, bad_token);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void embedding_shard_backward(const std::int32_t* ids, const float* dout, float* dtable,
                              std::int64_t tokens, std::int64_t first, std::int64_t rows,
                              std::int64_t vocab, std::int64_t hidden, std::int64_t padding_idx,
                              cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(embedding_backward_kernel, static_cast<unsigned>(tokens), kBlock, 0, stream)
  (ids, dout, dtable, first, rows, vocab, hidden, padding_idx);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void rmsnorm_forward(const float* x, const float* weight, float* y, float* inv_rms,
                     std::int64_t rows, std::int64_t n, float eps, bool one_plus_weight,
                     cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(rmsnorm_forward_kernel, static_cast<unsigned>(rows), kBlock, 0, stream)
  (x, weight, y, inv_rms, n, eps, one_plus_weight ? 1.0f : 0.0f);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(const float* dy, const float* x, const float* weight, const float* inv_rms,
                      float* dx, float* dweight, std::int64_t rows, std::int64_t n,
                      bool one_plus_weight, bool accumulate_dx, cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(rmsnorm_backward_kernel, static_cast<unsigned>(rows), kBlock, 0, stream)
  (dy, x, weight, inv_rms, dx, dweight, n, one_plus_weight ? 1.0f : 0.0f, accumulate_dx);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void router_forward(const float* logits, std::int64_t tokens, int experts, int top_k,
                    bool normalize_top_k, std::int32_t* expert_ids, float* weights, float* probs,
                    cudaStream_t stream) {
  if (top_k < 1 || top_k > experts) {
    core::throw_runtime_error("kernels::router_forward: top_k " + std::to_string(top_k) +
                              " must be in [1, " + std::to_string(experts) + "]");
  }
  if (tokens == 0) return;
  DYNCP_LAUNCH(router_forward_kernel, grid_for(tokens, 128), 128, 0, stream)
  (logits, tokens, experts, top_k, normalize_top_k, expert_ids, weights, probs);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void balanced_router_forward(const float* logits, const std::int32_t* positions,
                             std::int64_t tokens, int experts, int layer, int top_k,
                             bool normalize_top_k, std::int32_t* expert_ids, float* weights,
                             float* probs, cudaStream_t stream) {
  if (top_k < 1 || top_k > experts || layer < 0) {
    core::throw_runtime_error("kernels::balanced_router_forward: top_k " + std::to_string(top_k) +
                              " must be in [1, " + std::to_string(experts) + "], layer >= 0");
  }
  if (tokens == 0) return;
  DYNCP_LAUNCH(balanced_router_forward_kernel, grid_for(tokens, 128), 128, 0, stream)
  (logits, positions, tokens, experts, layer, top_k, normalize_top_k, expert_ids, weights, probs);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void router_backward(const float* dweights, const std::int32_t* expert_ids, const float* weights,
                     const float* probs, std::int64_t tokens, int experts, int top_k,
                     bool normalize_top_k, float* dlogits, cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(router_backward_kernel, grid_for(tokens, 128), 128, 0, stream)
  (dweights, expert_ids, weights, probs, tokens, experts, top_k, normalize_top_k, dlogits);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
