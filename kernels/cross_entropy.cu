// Fused chunked cross-entropy (kernels/cross_entropy.hpp).
#include <cuda_runtime.h>

#include <algorithm>

#include "common.cuh"
#include "cross_entropy.hpp"

namespace dyncp::kernels {
namespace {

__device__ inline void store_gradient(float* at, float g) {
  *at = g;
}
__device__ inline void store_gradient(bf16* at, float g) {
  *at = __float2bfloat16_rn(g);
}

// One block per row of the chunk; Grad is the dlogits element type.
template <typename Grad>
__global__ void softmax_nll_kernel(const float* logits, std::int64_t vocab,
                                   const std::int32_t* labels, const std::uint8_t* loss_mask,
                                   std::int64_t row0, float grad_scale, bool want_grad,
                                   Grad* dlogits, float* per_token_loss, double* loss_sum,
                                   unsigned long long* count, std::int32_t* bad_label) {
  __shared__ float partial[32];
  const std::int64_t r = blockIdx.x, t = row0 + r;
  const float* row = logits + r * vocab;
  const std::int32_t label = labels[t];
  bool counted = label >= 0 && (loss_mask == nullptr || loss_mask[t] != 0);
  if (counted && label >= vocab) {
    if (threadIdx.x == 0 && bad_label != nullptr) atomicMin(bad_label, static_cast<int>(t));
    counted = false;
  }
  float max_logit = -INFINITY;
  for (std::int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
    max_logit = fmaxf(max_logit, row[v]);
  max_logit = detail::warp_max(max_logit);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = max_logit;
  __syncthreads();
  max_logit = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)
    max_logit = fmaxf(max_logit, partial[w]);
  __syncthreads();
  float sum = 0.0f;
  for (std::int64_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += expf(row[v] - max_logit);
  sum = detail::block_sum(sum, partial);
  const float lse = max_logit + logf(sum);
  if (threadIdx.x == 0) {
    const float loss = counted ? lse - row[label] : 0.0f;
    if (per_token_loss != nullptr) per_token_loss[t] = loss;
    if (counted) {
      atomicAdd(loss_sum, static_cast<double>(loss));
      atomicAdd(count, 1ull);
    }
  }
  if (!want_grad) return;
  for (std::int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float g = counted ? grad_scale * (expf(row[v] - lse) - (v == label ? 1.0f : 0.0f)) : 0.0f;
    store_gradient(dlogits + r * vocab + v, g);
  }
}

}  // namespace

namespace {

// The chunk's logits in fp32 from either operand type.
void chunk_logits(Blas& blas, const float* hidden, const float* weight, float* logits,
                  std::int64_t rows, std::int64_t h, std::int64_t vocab, cudaStream_t stream) {
  linear_forward(blas, hidden, weight, logits, rows, h, vocab, stream);
}
void chunk_logits(Blas& blas, const bf16* hidden, const bf16* weight, float* logits,
                  std::int64_t rows, std::int64_t h, std::int64_t vocab, cudaStream_t stream) {
  linear_forward(blas, hidden, weight, logits, OutType::f32, rows, h, vocab, stream);
}

// T: the operand and dlogits element type (fp32, or bf16 under mixed precision).
template <typename T>
void cross_entropy_chunks(Blas& blas, const CrossEntropyArgs& a, float* logits_scratch, T* dlogits,
                          cudaStream_t stream) {
  const bool want_grad = a.dhidden != nullptr || a.dlm_weight != nullptr;
  const std::int64_t h = a.hidden_size;
  const auto* weight = static_cast<const T*>(a.lm_weight);
  for (std::int64_t row0 = 0; row0 < a.tokens; row0 += a.token_chunk) {
    const std::int64_t rows = std::min(a.token_chunk, a.tokens - row0);
    const T* hidden = static_cast<const T*>(a.hidden) + row0 * h;
    chunk_logits(blas, hidden, weight, logits_scratch, rows, h, a.vocab, stream);
    DYNCP_LAUNCH(softmax_nll_kernel<T>, static_cast<unsigned>(rows), detail::kBlock, 0, stream)
    (logits_scratch, a.vocab, a.labels, a.loss_mask, row0, a.grad_scale, want_grad, dlogits,
     a.per_token_loss, a.loss_sum, a.num_loss_tokens, a.bad_label);
    DYNCP_CUDA_CHECK_LAUNCH();
    if (!want_grad) continue;
    // dhidden = dlogits · W (overwrite); dW += dlogits^T · hidden.
    linear_backward(blas, dlogits, hidden, weight,
                    a.dhidden == nullptr ? nullptr : a.dhidden + row0 * h, false, a.dlm_weight,
                    rows, h, a.vocab, stream);
  }
}

}  // namespace

void fused_cross_entropy(Blas& blas, const CrossEntropyArgs& a, float* logits_scratch,
                         void* dlogits_scratch, cudaStream_t stream) {
  if (a.token_chunk < 1) core::throw_runtime_error("kernels::fused_cross_entropy: token_chunk < 1");
  if (a.fp32) {
    cross_entropy_chunks(blas, a, logits_scratch, static_cast<float*>(dlogits_scratch), stream);
  } else {
    cross_entropy_chunks(blas, a, logits_scratch, static_cast<bf16*>(dlogits_scratch), stream);
  }
}

}  // namespace dyncp::kernels
