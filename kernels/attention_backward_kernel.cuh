#pragma once
// The flash-attention backward kernels (D = rowsum(dout ⊙ out), then dQ / dK / dV) and their
// shared-memory layout (kernels/attention.hpp), kept apart from the launch code.
#include "attention.hpp"
#include "attention_mask.cuh"
#include "attention_tile.cuh"
#include "common.cuh"

namespace dyncp::kernels::attention_detail::backward {

constexpr int kBlockM = 32;  // query rows per step
constexpr int kBlockN = 32;  // key rows per block

struct BackwardLayout {
  std::size_t k, v, q, dout, p, dp, p16, ds16, dk, dv, dq, lse, delta, q_pos, kv_pos, flags, bytes;
  __host__ __device__ explicit BackwardLayout(int d) {
    SmemCursor at;
    k = at.take(sizeof(bf16) * kBlockN * (d + kBf16Pad));
    v = at.take(sizeof(bf16) * kBlockN * (d + kBf16Pad));
    q = at.take(sizeof(bf16) * kBlockM * (d + kBf16Pad));
    dout = at.take(sizeof(bf16) * kBlockM * (d + kBf16Pad));
    p = at.take(sizeof(float) * kBlockM * (kBlockN + kF32Pad));
    dp = at.take(sizeof(float) * kBlockM * (kBlockN + kF32Pad));
    p16 = at.take(sizeof(bf16) * kBlockM * (kBlockN + kBf16Pad));
    ds16 = at.take(sizeof(bf16) * kBlockM * (kBlockN + kBf16Pad));
    dk = at.take(sizeof(float) * kBlockN * (d + kF32Pad));
    dv = at.take(sizeof(float) * kBlockN * (d + kF32Pad));
    dq = at.take(sizeof(float) * kBlockM * (d + kF32Pad));
    lse = at.take(sizeof(float) * kBlockM);
    delta = at.take(sizeof(float) * kBlockM);
    q_pos = at.take(sizeof(int) * kBlockM);
    kv_pos = at.take(sizeof(int) * kBlockN);
    flags = at.take(sizeof(int) * 4);
    bytes = at.offset;
  }
};

// D[i, h] = dout[i, h] · out[i, h]; one warp per (row, head).
__global__ void attention_delta_kernel(const bf16* dout, const float* out, float* delta,
                                       std::int64_t rows, int d) {
  const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= rows) return;
  float sum = 0.0f;
  for (int c = threadIdx.x % 32; c < d; c += 32)
    sum += __bfloat162float(dout[row * d + c]) * out[row * d + c];
  sum = detail::warp_sum(sum);
  if (threadIdx.x % 32 == 0) delta[row] = sum;
}

__global__ void __launch_bounds__(kThreads)
    attention_backward_kernel(AttentionShape shape, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* dout, const float* lse, const float* delta, float* dk,
                              float* dv, bool accumulate_dkv) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  const int d = shape.head_dim, ld_h = d + kBf16Pad, ld_s = kBlockN + kF32Pad,
            ld_p = kBlockN + kBf16Pad, ld_o = d + kF32Pad;
  const BackwardLayout at(d);
  bf16* k_tile = reinterpret_cast<bf16*>(smem + at.k);
  bf16* v_tile = reinterpret_cast<bf16*>(smem + at.v);
  bf16* q_tile = reinterpret_cast<bf16*>(smem + at.q);
  bf16* dout_tile = reinterpret_cast<bf16*>(smem + at.dout);
  float* p_tile = reinterpret_cast<float*>(smem + at.p);
  float* dp_tile = reinterpret_cast<float*>(smem + at.dp);
  bf16* p16_tile = reinterpret_cast<bf16*>(smem + at.p16);
  bf16* ds16_tile = reinterpret_cast<bf16*>(smem + at.ds16);
  float* dk_acc = reinterpret_cast<float*>(smem + at.dk);
  float* dv_acc = reinterpret_cast<float*>(smem + at.dv);
  float* lse_rows = reinterpret_cast<float*>(smem + at.lse);
  float* delta_rows = reinterpret_cast<float*>(smem + at.delta);
  int* q_pos = reinterpret_cast<int*>(smem + at.q_pos);
  int* kv_pos = reinterpret_cast<int*>(smem + at.kv_pos);
  // The query tile's position range and the key tile's (real rows only), for tile skipping.
  int& tile_max_q_pos = reinterpret_cast<int*>(smem + at.flags)[0];
  int& tile_min_kv_pos = reinterpret_cast<int*>(smem + at.flags)[1];
  int& tile_min_q_pos = reinterpret_cast<int*>(smem + at.flags)[2];
  int& tile_max_kv_pos = reinterpret_cast<int*>(smem + at.flags)[3];
  const int window = shape.sliding_window;

  const int seq = blockIdx.z, kv_head = blockIdx.y;
  const int kv0 = shape.kv_cu_seqlens[seq] + blockIdx.x * kBlockN;
  const int kv_end = shape.kv_cu_seqlens[seq + 1];
  if (kv0 >= kv_end) return;  // the whole block leaves together
  const int cols = min(kBlockN, kv_end - kv0);
  const int group = shape.q_heads / shape.kv_heads;

  load_tile(k_tile, k, kv0, cols, kBlockN, shape.kv_heads, kv_head, d);
  load_tile(v_tile, v, kv0, cols, kBlockN, shape.kv_heads, kv_head, d);
  if (threadIdx.x == 0) {
    tile_min_kv_pos = INT_MAX;
    tile_max_kv_pos = INT_MIN;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < kBlockN; c += blockDim.x) {
    kv_pos[c] = c < cols ? shape.kv_positions[kv0 + c] : INT_MAX;
    if (c < cols) {
      atomicMin(&tile_min_kv_pos, kv_pos[c]);
      atomicMax(&tile_max_kv_pos, kv_pos[c]);
    }
  }
  for (int i = threadIdx.x; i < kBlockN * ld_o; i += blockDim.x) dk_acc[i] = dv_acc[i] = 0.0f;

  const int q_end = shape.q_cu_seqlens[seq + 1];
  for (int head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    for (int q0 = shape.q_cu_seqlens[seq]; q0 < q_end; q0 += kBlockM) {
      const int rows = min(kBlockM, q_end - q0);
      __syncthreads();  // the previous step is done with the query-side tiles
      if (threadIdx.x == 0) {
        tile_max_q_pos = INT_MIN;
        tile_min_q_pos = INT_MAX;
      }
      __syncthreads();
      for (int r = threadIdx.x; r < kBlockM; r += blockDim.x) {
        const std::int64_t at_row = static_cast<std::int64_t>(q0 + r) * shape.q_heads + head;
        q_pos[r] = r < rows ? shape.q_positions[q0 + r] : INT_MIN;
        lse_rows[r] = r < rows ? lse[at_row] : 0.0f;
        delta_rows[r] = r < rows ? delta[at_row] : 0.0f;
        if (r < rows) {
          atomicMax(&tile_max_q_pos, q_pos[r]);
          atomicMin(&tile_min_q_pos, q_pos[r]);
        }
      }
      __syncthreads();
      // No query here sees any key of the tile (future, or a window or more behind).
      if (tile_hidden(tile_min_q_pos, tile_max_q_pos, tile_min_kv_pos, tile_max_kv_pos, window))
        continue;
      load_tile(q_tile, q, q0, rows, kBlockM, shape.q_heads, head, d);
      load_tile(dout_tile, dout, q0, rows, kBlockM, shape.q_heads, head, d);
      __syncthreads();

      // P = exp(S·scale − lse) on visible pairs (a query with a visible key has finite lse).
      mma_tile<wmma::row_major, wmma::col_major>(p_tile, ld_s, q_tile, ld_h, k_tile, ld_h, kBlockM,
                                                 kBlockN, d, false);
      __syncthreads();
      for (int i = threadIdx.x; i < kBlockM * kBlockN; i += blockDim.x) {
        const int r = i / kBlockN, c = i % kBlockN;
        const float p = key_visible(kv_pos[c], q_pos[r], window)
                            ? expf(p_tile[r * ld_s + c] * shape.scale - lse_rows[r])
                            : 0.0f;
        p_tile[r * ld_s + c] = p;
        p16_tile[r * ld_p + c] = __float2bfloat16_rn(p);
      }
      __syncthreads();
      // dV += P^T dO;  dP = dO V^T.
      mma_tile<wmma::col_major, wmma::row_major>(dv_acc, ld_o, p16_tile, ld_p, dout_tile, ld_h,
                                                 kBlockN, d, kBlockM, true);
      mma_tile<wmma::row_major, wmma::col_major>(dp_tile, ld_s, dout_tile, ld_h, v_tile, ld_h,
                                                 kBlockM, kBlockN, d, false);
      __syncthreads();
      // dS = P (dP − D); the softmax scale is applied once to dQ and dK at the end.
      for (int i = threadIdx.x; i < kBlockM * kBlockN; i += blockDim.x) {
        const int r = i / kBlockN, c = i % kBlockN;
        ds16_tile[r * ld_p + c] =
            __float2bfloat16_rn(p_tile[r * ld_s + c] * (dp_tile[r * ld_s + c] - delta_rows[r]));
      }
      __syncthreads();
      // dK += dS^T Q (dQ: attention_dq_kernel.cuh, without atomics).
      mma_tile<wmma::col_major, wmma::row_major>(dk_acc, ld_o, ds16_tile, ld_p, q_tile, ld_h,
                                                 kBlockN, d, kBlockM, true);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cols * d; i += blockDim.x) {
    const int r = i / d, c = i % d;
    const std::int64_t at_out =
        (static_cast<std::int64_t>(kv0 + r) * shape.kv_heads + kv_head) * d + c;
    const float dk_value = shape.scale * dk_acc[r * ld_o + c], dv_value = dv_acc[r * ld_o + c];
    dk[at_out] = accumulate_dkv ? dk[at_out] + dk_value : dk_value;
    dv[at_out] = accumulate_dkv ? dv[at_out] + dv_value : dv_value;
  }
}

}  // namespace dyncp::kernels::attention_detail::backward
