// The vocabulary-parallel LM head + cross-entropy (kernels/vocab_parallel_cross_entropy.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "common.cuh"
#include "vocab_parallel_cross_entropy.hpp"

namespace dyncp::kernels {
namespace {

using detail::kBlock;

// list_loss_rows runs as one block: thread i owns the i-th contiguous segment of the tokens, so
// the order of the counted rows and of the loss sum is fixed by the token order alone.
constexpr int kListThreads = 256;

__device__ inline bool is_counted(std::int32_t label, const std::uint8_t* loss_mask, std::int64_t t,
                                  std::int64_t vocab_size) {
  return label >= 0 && label < vocab_size && (loss_mask == nullptr || loss_mask[t] != 0);
}

__global__ void list_loss_rows_kernel(const std::int32_t* labels, const std::uint8_t* loss_mask,
                                      std::int64_t tokens, std::int64_t vocab_size,
                                      const float* lse, const float* target, float* per_token_loss,
                                      std::int32_t* row_index, LossRowsStatus* status) {
  __shared__ long long counts[kListThreads];
  __shared__ std::int32_t bad[kListThreads];
  __shared__ double partial[32];
  const std::int64_t segment = (tokens + blockDim.x - 1) / blockDim.x;
  const std::int64_t start = threadIdx.x * segment;
  const std::int64_t begin = start < tokens ? start : tokens;
  const std::int64_t end = begin + segment < tokens ? begin + segment : tokens;
  long long count = 0;
  std::int32_t first_bad = INT_MAX;
  double loss_sum = 0.0;
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int32_t label = labels[t];
    if (label >= vocab_size && first_bad == INT_MAX) first_bad = static_cast<std::int32_t>(t);
    const bool counted = is_counted(label, loss_mask, t, vocab_size);
    count += counted ? 1 : 0;
    if (lse == nullptr) continue;
    const float loss = counted ? lse[t] - target[t] : 0.0f;
    if (per_token_loss != nullptr) per_token_loss[t] = loss;
    loss_sum += static_cast<double>(loss);
  }
  counts[threadIdx.x] = count;
  bad[threadIdx.x] = first_bad;
  __syncthreads();
  long long offset = 0;
  for (unsigned i = 0; i < threadIdx.x; ++i) offset += counts[i];
  for (std::int64_t t = begin; t < end; ++t) {
    if (is_counted(labels[t], loss_mask, t, vocab_size))
      row_index[offset++] = static_cast<std::int32_t>(t);
  }
  loss_sum = detail::block_sum(loss_sum, partial);
  if (threadIdx.x == 0) {
    long long total = 0;
    std::int32_t smallest = INT_MAX;
    for (unsigned i = 0; i < blockDim.x; ++i) {
      total += counts[i];
      smallest = bad[i] < smallest ? bad[i] : smallest;
    }
    status->loss_sum = loss_sum;
    status->count = total;
    status->bad_label = smallest;
  }
}

// Gathers rows row_index[row0 + r] of x into compact rows r (one block per row).
template <typename T>
__global__ void gather_rows_kernel(const T* x, const std::int32_t* row_index, std::int64_t row0,
                                   std::int64_t width, T* rows) {
  const std::int64_t r = blockIdx.x, t = row_index[row0 + r];
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
    rows[r * width + c] = x[t * width + c];
}

// The inverse for the dhidden rows.
__global__ void scatter_rows_kernel(const float* rows, const std::int32_t* row_index,
                                    std::int64_t row0, std::int64_t width, float* x) {
  const std::int64_t r = blockIdx.x, t = row_index[row0 + r];
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
    x[t * width + c] = rows[r * width + c];
}

// Folds one tile [rows, nv] (shard columns v0 ..) into each row's running max and sum of
// exp(logit − max), and picks the label's logit when it lies in the tile. One block per row.
__global__ void fold_tile_kernel(const float* logits, std::int64_t nv, std::int64_t v0,
                                 bool first_tile, const std::int32_t* labels,
                                 const std::int32_t* row_index, std::int64_t row0,
                                 std::int64_t shard_first, float* row_max, float* row_sum,
                                 float* row_target) {
  __shared__ float partial[32];
  const std::int64_t r = blockIdx.x;
  const float* row = logits + r * nv;
  float tile_max = -INFINITY;
  for (std::int64_t v = threadIdx.x; v < nv; v += blockDim.x) tile_max = fmaxf(tile_max, row[v]);
  tile_max = detail::warp_max(tile_max);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = tile_max;
  __syncthreads();
  const float old_max = first_tile ? -INFINITY : row_max[r];
  float new_max = old_max;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) new_max = fmaxf(new_max, partial[w]);
  __syncthreads();
  float sum = 0.0f;
  for (std::int64_t v = threadIdx.x; v < nv; v += blockDim.x) sum += expf(row[v] - new_max);
  sum = detail::block_sum(sum, partial);
  if (threadIdx.x != 0) return;
  const float old_sum = first_tile ? 0.0f : row_sum[r] * expf(old_max - new_max);
  row_sum[r] = old_sum + sum;
  row_max[r] = new_max;
  const std::int64_t local = labels[row_index[row0 + r]] - shard_first;
  if (first_tile) row_target[r] = 0.0f;
  if (local >= v0 && local < v0 + nv) row_target[r] = row[local - v0];
}

__global__ void finish_logsumexp_kernel(const float* row_max, const float* row_sum,
                                        const float* row_target, const std::int32_t* row_index,
                                        std::int64_t row0, std::int64_t rows, float* shard_lse,
                                        float* target_logit) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = row_index[row0 + r];
    shard_lse[t] = row_max[r] + logf(row_sum[r]);
    target_logit[t] = row_target[r];
  }
}

__device__ inline void store_gradient(float* at, float g) {
  *at = g;
}
__device__ inline void store_gradient(bf16* at, float g) {
  *at = __float2bfloat16_rn(g);
}

// dlogits of one tile, as the CPU op: exp(logit − lse) · grad_scale, minus grad_scale at the
// label. One block per row; Grad is the dlogits element type.
template <typename Grad>
__global__ void tile_dlogits_kernel(const float* logits, std::int64_t nv, std::int64_t v0,
                                    const std::int32_t* labels, const std::int32_t* row_index,
                                    std::int64_t row0, std::int64_t shard_first, const float* lse,
                                    float grad_scale, Grad* dlogits) {
  const std::int64_t r = blockIdx.x, t = row_index[row0 + r];
  const float row_lse = lse[t];
  const std::int64_t label_column = labels[t] - shard_first - v0;
  for (std::int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
    float g = expf(logits[r * nv + v] - row_lse) * grad_scale;
    if (v == label_column) g -= grad_scale;
    store_gradient(dlogits + r * nv + v, g);
  }
}

__global__ void combine_kernel(const float* shard_lses, std::int64_t shards, std::int64_t tokens,
                               float* lse) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < tokens;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    float m = -INFINITY;
    for (std::int64_t s = 0; s < shards; ++s) m = fmaxf(m, shard_lses[s * tokens + t]);
    if (m == -INFINITY) {
      lse[t] = m;
      continue;
    }
    float sum = 0.0f;
    for (std::int64_t s = 0; s < shards; ++s) sum += expf(shard_lses[s * tokens + t] - m);
    lse[t] = m + logf(sum);
  }
}

// The tile's logits in fp32 from either operand type.
void tile_logits(Blas& blas, const float* rows, const float* weight, float* logits,
                 std::int64_t count, std::int64_t h, std::int64_t nv, cudaStream_t stream) {
  linear_forward(blas, rows, weight, logits, count, h, nv, stream);
}
void tile_logits(Blas& blas, const bf16* rows, const bf16* weight, float* logits,
                 std::int64_t count, std::int64_t h, std::int64_t nv, cudaStream_t stream) {
  linear_forward(blas, rows, weight, logits, OutType::f32, count, h, nv, stream);
}

template <typename T>
void gather(const VocabShardArgs& a, std::int64_t row0, std::int64_t rows, T* h_rows,
            cudaStream_t stream) {
  DYNCP_LAUNCH(gather_rows_kernel<T>, static_cast<unsigned>(rows), kBlock, 0, stream)
  (static_cast<const T*>(a.hidden), a.row_index, row0, a.hidden_size, h_rows);
  DYNCP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void logsumexp_chunks(Blas& blas, const VocabShardArgs& a, const VocabShardScratch& s,
                      float* shard_lse, float* target_logit, cudaStream_t stream) {
  const std::int64_t h = a.hidden_size;
  const auto* weight = static_cast<const T*>(a.lm_weight);
  auto* h_rows = static_cast<T*>(s.h_rows);
  for (std::int64_t row0 = 0; row0 < a.count; row0 += a.token_chunk) {
    const std::int64_t rows = std::min(a.token_chunk, a.count - row0);
    gather(a, row0, rows, h_rows, stream);
    for (std::int64_t v0 = 0; v0 < a.shard_rows; v0 += a.vocab_chunk) {
      const std::int64_t nv = std::min(a.vocab_chunk, a.shard_rows - v0);
      tile_logits(blas, h_rows, weight + v0 * h, s.logits, rows, h, nv, stream);
      DYNCP_LAUNCH(fold_tile_kernel, static_cast<unsigned>(rows), kBlock, 0, stream)
      (s.logits, nv, v0, v0 == 0, a.labels, a.row_index, row0, a.shard_first, s.row_max, s.row_sum,
       s.row_target);
      DYNCP_CUDA_CHECK_LAUNCH();
    }
    DYNCP_LAUNCH(finish_logsumexp_kernel, detail::grid_for(rows), kBlock, 0, stream)
    (s.row_max, s.row_sum, s.row_target, a.row_index, row0, rows, shard_lse, target_logit);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
}

template <typename T>
void gradient_chunks(Blas& blas, const VocabShardArgs& a, const float* lse, float grad_scale,
                     const VocabShardScratch& s, float* dhidden, float* dlm_weight,
                     cudaStream_t stream) {
  const std::int64_t h = a.hidden_size;
  const auto* weight = static_cast<const T*>(a.lm_weight);
  auto* h_rows = static_cast<T*>(s.h_rows);
  auto* dlogits = static_cast<T*>(s.dlogits);
  for (std::int64_t row0 = 0; row0 < a.count; row0 += a.token_chunk) {
    const std::int64_t rows = std::min(a.token_chunk, a.count - row0);
    gather(a, row0, rows, h_rows, stream);
    for (std::int64_t v0 = 0; v0 < a.shard_rows; v0 += a.vocab_chunk) {
      const std::int64_t nv = std::min(a.vocab_chunk, a.shard_rows - v0);
      tile_logits(blas, h_rows, weight + v0 * h, s.logits, rows, h, nv, stream);
      DYNCP_LAUNCH(tile_dlogits_kernel<T>, static_cast<unsigned>(rows), kBlock, 0, stream)
      (s.logits, nv, v0, a.labels, a.row_index, row0, a.shard_first, lse, grad_scale, dlogits);
      DYNCP_CUDA_CHECK_LAUNCH();
      // dh_rows (=, then +=) dlogits · W_chunk; dW_chunk += dlogitsᵀ · h_rows.
      linear_backward(blas, dlogits, h_rows, weight + v0 * h, s.dh_rows, v0 > 0,
                      dlm_weight == nullptr ? nullptr : dlm_weight + v0 * h, rows, h, nv, stream);
    }
    DYNCP_LAUNCH(scatter_rows_kernel, static_cast<unsigned>(rows), kBlock, 0, stream)
    (s.dh_rows, a.row_index, row0, h, dhidden);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
}

void check_chunks(const VocabShardArgs& a, const char* what) {
  if (a.token_chunk < 1 || a.vocab_chunk < 1)
    core::throw_runtime_error(std::string("kernels::") + what + ": chunks must be >= 1");
}

}  // namespace

void list_loss_rows(const std::int32_t* labels, const std::uint8_t* loss_mask, std::int64_t tokens,
                    std::int64_t vocab_size, const float* lse, const float* target,
                    float* per_token_loss, std::int32_t* row_index, LossRowsStatus* status,
                    cudaStream_t stream) {
  DYNCP_LAUNCH(list_loss_rows_kernel, 1, kListThreads, 0, stream)
  (labels, loss_mask, tokens, vocab_size, lse, target, per_token_loss, row_index, status);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void vocab_shard_logsumexp(Blas& blas, const VocabShardArgs& a, const VocabShardScratch& s,
                           float* shard_lse, float* target_logit, cudaStream_t stream) {
  check_chunks(a, "vocab_shard_logsumexp");
  const std::size_t bytes = static_cast<std::size_t>(a.tokens) * sizeof(float);
  DYNCP_CUDA_CHECK(cudaMemsetAsync(shard_lse, 0, bytes, stream));
  DYNCP_CUDA_CHECK(cudaMemsetAsync(target_logit, 0, bytes, stream));
  if (a.fp32) {
    logsumexp_chunks<float>(blas, a, s, shard_lse, target_logit, stream);
  } else {
    logsumexp_chunks<bf16>(blas, a, s, shard_lse, target_logit, stream);
  }
}

void combine_shard_logsumexp(const float* shard_lses, std::int64_t shards, std::int64_t tokens,
                             float* lse, cudaStream_t stream) {
  if (tokens == 0) return;
  DYNCP_LAUNCH(combine_kernel, detail::grid_for(tokens), kBlock, 0, stream)
  (shard_lses, shards, tokens, lse);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void vocab_shard_gradients(Blas& blas, const VocabShardArgs& a, const float* lse, float grad_scale,
                           const VocabShardScratch& s, float* dhidden, float* dlm_weight,
                           cudaStream_t stream) {
  check_chunks(a, "vocab_shard_gradients");
  DYNCP_CUDA_CHECK(cudaMemsetAsync(
      dhidden, 0, static_cast<std::size_t>(a.tokens * a.hidden_size) * sizeof(float), stream));
  if (a.fp32) {
    gradient_chunks<float>(blas, a, lse, grad_scale, s, dhidden, dlm_weight, stream);
  } else {
    gradient_chunks<bf16>(blas, a, lse, grad_scale, s, dhidden, dlm_weight, stream);
  }
}

}  // namespace dyncp::kernels
