#pragma once
// One token's routing (ops/router.hpp), shared by the router kernel and the fused dispatch
// (internal to kernels/): softmax over the E logits into p, the top k in descending order of p
// (ties to the lower index), their weights, renormalised over the k when asked. Every id it
// writes lies in [0, E), whatever the logits hold.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace dyncp::kernels::detail {

__device__ inline void route_token(const float* l, float* p, int experts, int top_k, bool normalize,
                                   std::int32_t* ids, float* weights) {
  float max_logit = -INFINITY;
  for (int e = 0; e < experts; ++e) max_logit = fmaxf(max_logit, l[e]);
  float sum = 0.0f;
  for (int e = 0; e < experts; ++e) {
    p[e] = expf(l[e] - max_logit);
    sum += p[e];
  }
  for (int e = 0; e < experts; ++e) p[e] /= sum;
  float selected_sum = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e) {
      bool taken = false;
      for (int m = 0; m < j; ++m) taken = taken || ids[m] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    ids[j] = best;
    weights[j] = p[best];
    selected_sum += p[best];
  }
  if (normalize) {
    for (int j = 0; j < top_k; ++j) weights[j] /= selected_sum;
  }
}

// Uniform routing of one token (ops::balanced_router_forward): the same softmax, then the k
// consecutive experts (mod E) from (position * k + layer).
__device__ inline void route_token_balanced(const float* l, float* p, int experts, int top_k,
                                            bool normalize, std::int64_t position, int layer,
                                            std::int32_t* ids, float* weights) {
  float max_logit = -INFINITY;
  for (int e = 0; e < experts; ++e) max_logit = fmaxf(max_logit, l[e]);
  float sum = 0.0f;
  for (int e = 0; e < experts; ++e) {
    p[e] = expf(l[e] - max_logit);
    sum += p[e];
  }
  for (int e = 0; e < experts; ++e) p[e] /= sum;
  const std::int64_t base = (position * top_k + layer) % experts + experts;
  float selected_sum = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    const int e = static_cast<int>((base + j) % experts);
    ids[j] = e;
    weights[j] = p[e];
    selected_sum += p[e];
  }
  if (normalize) {
    for (int j = 0; j < top_k; ++j) weights[j] /= selected_sum;
  }
}

}  // namespace dyncp::kernels::detail
