// fp32 varlen attention (kernels/attention.hpp, the _f32 functions): the fp32 training path's
// kernel, written for exactness rather than speed. One thread per (query row, query head)
// walks its sequence's keys with an online softmax in fp32; backward recomputes each
// probability from the saved lse and scatters dK / dV with fp32 atomics. The bf16
// tensor-core kernels (attention_forward.cu / attention_backward.cu) are the fast path.
#include <cmath>

#include "attention.hpp"
#include "attention_mask.cuh"
#include "common.cuh"

namespace dyncp::kernels {
namespace {

using attention_detail::key_visible;
using detail::kBlock;

// The sequence holding row `row` of a cu_seqlens array (binary search).
__device__ inline int sequence_of(const std::int32_t* cu, int sequences, std::int64_t row) {
  int lo = 0, hi = sequences - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ inline float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// What one thread of the kernels below works on: one (query row, query head) item.
struct QueryItem {
  std::int64_t item, row;
  int kv_head, seq, q_pos;
};

__device__ inline bool locate(const AttentionShape& shape, QueryItem& at) {
  at.item = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (at.item >= shape.q_tokens * shape.q_heads) return false;
  at.row = at.item / shape.q_heads;
  const int head = static_cast<int>(at.item % shape.q_heads);
  at.kv_head = head / (shape.q_heads / shape.kv_heads);
  at.seq = sequence_of(shape.q_cu_seqlens, shape.num_seqs, at.row);
  at.q_pos = shape.q_positions[at.row];
  return true;
}

__global__ void attention_f32_forward_kernel(AttentionShape shape, const float* q, const float* k,
                                             const float* v, float* out, float* lse) {
  QueryItem at;
  if (!locate(shape, at)) return;
  const std::int64_t item = at.item;
  const int kv_head = at.kv_head, seq = at.seq, q_pos = at.q_pos, d = shape.head_dim;
  const float* qi = q + item * d;
  float* oi = out + item * d;
  for (int c = 0; c < d; ++c) oi[c] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int j = shape.kv_cu_seqlens[seq]; j < shape.kv_cu_seqlens[seq + 1]; ++j) {
    if (!key_visible(shape.kv_positions[j], q_pos, shape.sliding_window)) continue;
    const std::int64_t kv = std::int64_t(j) * shape.kv_heads + kv_head;
    const float s = shape.scale * dot(qi, k + kv * d, d);
    const float new_max = fmaxf(running_max, s);
    const float rescale = expf(running_max - new_max), p = expf(s - new_max);
    running_sum = running_sum * rescale + p;
    const float* vj = v + kv * d;
    for (int c = 0; c < d; ++c) oi[c] = oi[c] * rescale + p * vj[c];
    running_max = new_max;
  }
  if (running_sum == 0.0f) {
    lse[item] = -INFINITY;
    return;
  }
  for (int c = 0; c < d; ++c) oi[c] /= running_sum;
  lse[item] = running_max + logf(running_sum);
}

// dq: overwrite or accumulate (the thread owns its row); dk / dv: atomically accumulated.
__global__ void attention_f32_backward_kernel(AttentionShape shape, const float* q, const float* k,
                                              const float* v, const float* dout, const float* out,
                                              const float* lse, float* dq, bool accumulate_dq,
                                              float* dk, float* dv) {
  QueryItem at;
  if (!locate(shape, at)) return;
  const std::int64_t item = at.item;
  const int kv_head = at.kv_head, seq = at.seq, q_pos = at.q_pos, d = shape.head_dim;
  const float* qi = q + item * d;
  const float* gi = dout + item * d;
  float* dqi = dq + item * d;
  if (!accumulate_dq)
    for (int c = 0; c < d; ++c) dqi[c] = 0.0f;
  const float row_lse = lse[item];
  if (row_lse == -INFINITY) return;
  const float delta = dot(gi, out + item * d, d);
  for (int j = shape.kv_cu_seqlens[seq]; j < shape.kv_cu_seqlens[seq + 1]; ++j) {
    if (!key_visible(shape.kv_positions[j], q_pos, shape.sliding_window)) continue;
    const std::int64_t kv = std::int64_t(j) * shape.kv_heads + kv_head;
    const float* kj = k + kv * d;
    const float* vj = v + kv * d;
    const float p = expf(shape.scale * dot(qi, kj, d) - row_lse);
    const float ds = p * (dot(gi, vj, d) - delta) * shape.scale;
    for (int c = 0; c < d; ++c) {
      dqi[c] += ds * kj[c];
      atomicAdd(dk + kv * d + c, ds * qi[c]);
      atomicAdd(dv + kv * d + c, p * gi[c]);
    }
  }
}

// One thread per (token, head) row: the merge reads the row's two lse values and rewrites the
// row, so no other thread ever sees a half-updated lse.
__global__ void attention_merge_f32_kernel(float* out_acc, float* lse_acc, const float* out_part,
                                           const float* lse_part, std::int64_t rows,
                                           std::int64_t d) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float a = lse_acc[r], b = lse_part[r];
  const float neg_inf = -INFINITY;
  if (b == neg_inf) return;
  float* acc = out_acc + r * d;
  const float* part = out_part + r * d;
  if (a == neg_inf) {
    for (std::int64_t c = 0; c < d; ++c) acc[c] = part[c];
    lse_acc[r] = b;
    return;
  }
  const float merged = fmaxf(a, b) + log1pf(expf(-fabsf(a - b)));
  const float wa = expf(a - merged), wb = expf(b - merged);
  for (std::int64_t c = 0; c < d; ++c) acc[c] = wa * acc[c] + wb * part[c];
  lse_acc[r] = merged;
}

unsigned blocks_for(const AttentionShape& shape) {
  return static_cast<unsigned>((shape.q_tokens * shape.q_heads + kBlock - 1) / kBlock);
}

}  // namespace

void attention_forward_f32(const AttentionShape& shape, const float* q, const float* k,
                           const float* v, float* out, float* lse, cudaStream_t stream) {
  if (shape.q_tokens * shape.q_heads == 0) return;
  DYNCP_LAUNCH(attention_f32_forward_kernel, blocks_for(shape), kBlock, 0, stream)
  (shape, q, k, v, out, lse);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void attention_backward_f32(const AttentionShape& shape, const float* q, const float* k,
                            const float* v, const float* dout, const float* out, const float* lse,
                            float* dq, bool accumulate_dq, float* dk, float* dv,
                            cudaStream_t stream) {
  if (shape.q_tokens * shape.q_heads == 0) return;
  DYNCP_LAUNCH(attention_f32_backward_kernel, blocks_for(shape), kBlock, 0, stream)
  (shape, q, k, v, dout, out, lse, dq, accumulate_dq, dk, dv);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void attention_merge_f32(float* out_acc, float* lse_acc, const float* out_part,
                         const float* lse_part, std::int64_t rows, std::int64_t head_dim,
                         cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(attention_merge_f32_kernel, static_cast<unsigned>((rows + kBlock - 1) / kBlock),
               kBlock, 0, stream)
  (out_acc, lse_acc, out_part, lse_part, rows, head_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
