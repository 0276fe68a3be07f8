#pragma once
// dQ of the flash-attention backward without atomics (kernels/attention.hpp): one block per
// (32-query tile, query head, sequence) owns its dQ rows and walks the sequence's 32-key tiles
// (skipping those no query of the tile sees): P again from the saved lse, dP = dO Vᵀ,
// dS = P (dP − D), dQ += dS K in shared memory, then one add into dq. The key-tile kernel
// (attention_backward_kernel.cuh) keeps dK and dV; the price of no atomics is QKᵀ and dO Vᵀ
// computed a second time.
#include "attention_backward_kernel.cuh"

namespace dyncp::kernels::attention_detail::backward {

__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(AttentionShape shape, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* dout, const float* lse, const float* delta, float* dq) {
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
  bf16* ds16_tile = reinterpret_cast<bf16*>(smem + at.ds16);
  float* dq_acc = reinterpret_cast<float*>(smem + at.dq);
  float* lse_rows = reinterpret_cast<float*>(smem + at.lse);
  float* delta_rows = reinterpret_cast<float*>(smem + at.delta);
  int* q_pos = reinterpret_cast<int*>(smem + at.q_pos);
  int* kv_pos = reinterpret_cast<int*>(smem + at.kv_pos);
  int& tile_max_q_pos = reinterpret_cast<int*>(smem + at.flags)[0];
  int& tile_min_kv_pos = reinterpret_cast<int*>(smem + at.flags)[1];
  int& tile_min_q_pos = reinterpret_cast<int*>(smem + at.flags)[2];
  int& tile_max_kv_pos = reinterpret_cast<int*>(smem + at.flags)[3];
  const int window = shape.sliding_window;

  const int seq = blockIdx.z, head = blockIdx.y;
  const int q0 = shape.q_cu_seqlens[seq] + blockIdx.x * kBlockM;
  const int q_end = shape.q_cu_seqlens[seq + 1];
  if (q0 >= q_end) return;  // the whole block leaves together
  const int rows = min(kBlockM, q_end - q0);
  const int kv_head = head / (shape.q_heads / shape.kv_heads);

  load_tile(q_tile, q, q0, rows, kBlockM, shape.q_heads, head, d);
  load_tile(dout_tile, dout, q0, rows, kBlockM, shape.q_heads, head, d);
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
  for (int i = threadIdx.x; i < kBlockM * ld_o; i += blockDim.x) dq_acc[i] = 0.0f;

  const int kv_end = shape.kv_cu_seqlens[seq + 1];
  for (int kv0 = shape.kv_cu_seqlens[seq]; kv0 < kv_end; kv0 += kBlockN) {
    const int cols = min(kBlockN, kv_end - kv0);
    __syncthreads();  // the previous step is done with the key-side tiles and their bounds
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
    __syncthreads();
    if (tile_hidden(tile_min_q_pos, tile_max_q_pos, tile_min_kv_pos, tile_max_kv_pos, window))
      continue;
    load_tile(k_tile, k, kv0, cols, kBlockN, shape.kv_heads, kv_head, d);
    load_tile(v_tile, v, kv0, cols, kBlockN, shape.kv_heads, kv_head, d);
    __syncthreads();
    // P = exp(S·scale − lse) on visible pairs; dP = dO Vᵀ.
    mma_tile<wmma::row_major, wmma::col_major>(p_tile, ld_s, q_tile, ld_h, k_tile, ld_h, kBlockM,
                                               kBlockN, d, false);
    mma_tile<wmma::row_major, wmma::col_major>(dp_tile, ld_s, dout_tile, ld_h, v_tile, ld_h,
                                               kBlockM, kBlockN, d, false);
    __syncthreads();
    // dS = P (dP − D), rounded to bf16 as in the key-tile kernel (the same dS both use).
    for (int i = threadIdx.x; i < kBlockM * kBlockN; i += blockDim.x) {
      const int r = i / kBlockN, c = i % kBlockN;
      const float p = key_visible(kv_pos[c], q_pos[r], window)
                          ? expf(p_tile[r * ld_s + c] * shape.scale - lse_rows[r])
                          : 0.0f;
      ds16_tile[r * ld_p + c] = __float2bfloat16_rn(p * (dp_tile[r * ld_s + c] - delta_rows[r]));
    }
    __syncthreads();
    // dQ += dS K.
    mma_tile<wmma::row_major, wmma::row_major>(dq_acc, ld_o, ds16_tile, ld_p, k_tile, ld_h, kBlockM,
                                               d, kBlockN, true);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * d; i += blockDim.x) {
    const int r = i / d, c = i % d;
    dq[(static_cast<std::int64_t>(q0 + r) * shape.q_heads + head) * d + c] +=
        shape.scale * dq_acc[r * ld_o + c];
  }
}

}  // namespace dyncp::kernels::attention_detail::backward
