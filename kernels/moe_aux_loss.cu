// The MoE load-balancing aux loss (ops/moe_aux_loss.hpp): per-sequence statistics, the loss
// and its gradient coefficients, and the backward into the router logits. Every sum runs in
// one thread in the CPU op's order, so the loss is the CPU's to the last bit under emulation.
#include <climits>

#include "common.cuh"
#include "hybrid.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;

// Block per sequence, thread per expert: the probability sum and the assignment count.
__global__ void aux_statistics_kernel(const float* probs, const std::int32_t* expert_ids,
                                      const std::int32_t* cu, const std::uint8_t* real,
                                      float* counts, float* prob_sums, std::int64_t experts,
                                      std::int64_t top_k, std::int32_t* bad_token) {
  const std::int64_t s = blockIdx.x;
  for (std::int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    float p_sum = 0, count = 0;
    for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
      if (real != nullptr && real[t] == 0) continue;
      p_sum += probs[t * experts + e];
      for (std::int64_t j = 0; j < top_k; ++j) {
        const std::int32_t id = expert_ids[t * top_k + j];
        if (id == e) count += 1.0f;
        if (e == 0 && (id < 0 || id >= experts) && bad_token != nullptr)
          atomicMin(bad_token, static_cast<std::int32_t>(t));
      }
    }
    counts[s * experts + e] = count;
    prob_sums[s * experts + e] = p_sum;
  }
}

// One thread per sequence (the sums over the experts in order, in double).
__global__ void aux_finish_kernel(const float* counts, const float* prob_sums,
                                  std::int64_t sequences, std::int64_t experts, std::int64_t top_k,
                                  double coef_over_n, float* grad_coeff, double* per_sequence) {
  for (std::int64_t s = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; s < sequences;
       s += std::int64_t(gridDim.x) * blockDim.x) {
    const float* c = counts + s * experts;
    const float* ps = prob_sums + s * experts;
    float* g = grad_coeff + s * experts;
    double assignments = 0;
    for (std::int64_t e = 0; e < experts; ++e) assignments += static_cast<double>(c[e]);
    const double real_tokens = assignments / static_cast<double>(top_k);
    if (real_tokens <= 0) {
      for (std::int64_t e = 0; e < experts; ++e) g[e] = 0.0f;
      per_sequence[s] = 0.0;
      continue;
    }
    const double factor = coef_over_n * static_cast<double>(experts) /
                          (static_cast<double>(top_k) * real_tokens * real_tokens);
    double dot = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
      dot += static_cast<double>(c[e]) * static_cast<double>(ps[e]);
      g[e] = static_cast<float>(factor * static_cast<double>(c[e]));
    }
    per_sequence[s] = factor * dot;
  }
}

__global__ void aux_total_kernel(const double* per_sequence, std::int64_t sequences, double* loss) {
  double total = 0;
  for (std::int64_t s = 0; s < sequences; ++s) total += per_sequence[s];
  *loss = total;
}

// Block per sequence, thread per token.
__global__ void aux_backward_kernel(const float* probs, const std::int32_t* cu,
                                    const std::uint8_t* real, const float* grad_coeff,
                                    float* dlogits, std::int64_t experts, float loss_scale) {
  const std::int64_t s = blockIdx.x;
  const float* gs = grad_coeff + s * experts;
  for (std::int64_t t = cu[s] + threadIdx.x; t < cu[s + 1]; t += blockDim.x) {
    if (real != nullptr && real[t] == 0) continue;
    const float* pt = probs + t * experts;
    float dot = 0;
    for (std::int64_t e = 0; e < experts; ++e) dot += pt[e] * gs[e];
    for (std::int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += loss_scale * pt[e] * (gs[e] - dot);
  }
}

}  // namespace

void moe_aux_loss_statistics(const float* probs, const std::int32_t* expert_ids,
                             const std::int32_t* cu_seqlens, const std::uint8_t* token_is_real,
                             float* counts, float* prob_sums, std::int64_t sequences,
                             std::int64_t experts, std::int64_t top_k, std::int32_t* bad_token,
                             cudaStream_t stream) {
  if (sequences * experts == 0) return;
  const unsigned block = experts < 128 ? 32u * static_cast<unsigned>((experts + 31) / 32) : 128u;
  DYNCP_LAUNCH(aux_statistics_kernel, static_cast<unsigned>(sequences), block, 0, stream)
  (probs, expert_ids, cu_seqlens, token_is_real, counts, prob_sums, experts, top_k, bad_token);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void moe_aux_loss_finish(const float* counts, const float* prob_sums, std::int64_t sequences,
                         std::int64_t experts, std::int64_t top_k, double coef_over_n,
                         float* grad_coeff, double* per_sequence, double* loss,
                         cudaStream_t stream) {
  if (sequences > 0) {
    DYNCP_LAUNCH(aux_finish_kernel, grid_for(sequences, 32), 32, 0, stream)
    (counts, prob_sums, sequences, experts, top_k, coef_over_n, grad_coeff, per_sequence);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  DYNCP_LAUNCH(aux_total_kernel, 1, 1, 0, stream)(per_sequence, sequences, loss);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void moe_aux_loss_backward(const float* probs, const std::int32_t* cu_seqlens,
                           const std::uint8_t* token_is_real, const float* grad_coeff,
                           float* dlogits, std::int64_t sequences, std::int64_t experts,
                           float loss_scale, cudaStream_t stream) {
  if (sequences * experts == 0) return;
  DYNCP_LAUNCH(aux_backward_kernel, static_cast<unsigned>(sequences), 64, 0, stream)
  (probs, cu_seqlens, token_is_real, grad_coeff, dlogits, experts, loss_scale);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
