#pragma once
// The flash-attention forward kernel and its shared-memory layout (kernels/attention.hpp), kept
// apart from the launch code so the device code is one readable unit.
#include <cuda_pipeline_primitives.h>

#include "attention.hpp"
#include "attention_mask.cuh"
#include "attention_tile.cuh"
#include "common.cuh"

namespace dyncp::kernels::attention_detail::forward {

constexpr int kBlockM = 64;  // query rows per block
constexpr int kBlockN = 64;  // key rows per step (two per lane in the softmax)

// K/V tiles are double-buffered (the next visible tile loads with cp.async while this one is
// computed) where two stages fit in Hopper's 227 KiB per block (d <= 128 here); d = 256 keeps
// one stage, its load still asynchronous but waited for at once.
constexpr std::size_t kMaxSharedPerBlock = 227 * 1024;

struct ForwardLayout {
  std::size_t q, k[2], v[2], s, p, o, row_max, row_sum, row_scale, q_pos, kv_pos[2], flags, bytes;
  int stages;
  __host__ __device__ ForwardLayout(int d, int stages_wanted) : stages(stages_wanted) {
    SmemCursor at;
    q = at.take(sizeof(bf16) * kBlockM * (d + kBf16Pad));
    for (int b = 0; b < 2; ++b) {
      k[b] = b < stages ? at.take(sizeof(bf16) * kBlockN * (d + kBf16Pad)) : k[0];
      v[b] = b < stages ? at.take(sizeof(bf16) * kBlockN * (d + kBf16Pad)) : v[0];
    }
    s = at.take(sizeof(float) * kBlockM * (kBlockN + kF32Pad));
    p = at.take(sizeof(bf16) * kBlockM * (kBlockN + kBf16Pad));
    o = at.take(sizeof(float) * kBlockM * (d + kF32Pad));
    row_max = at.take(sizeof(float) * kBlockM);
    row_sum = at.take(sizeof(float) * kBlockM);
    row_scale = at.take(sizeof(float) * kBlockM);
    q_pos = at.take(sizeof(int) * kBlockM);
    kv_pos[0] = at.take(sizeof(int) * kBlockN);
    kv_pos[1] = stages > 1 ? at.take(sizeof(int) * kBlockN) : kv_pos[0];
    flags = at.take(sizeof(int) * 4);
    bytes = at.offset;
  }
  // Two stages where they fit, else one.
  __host__ __device__ explicit ForwardLayout(int d)
      : ForwardLayout(d, ForwardLayout(d, 2).bytes <= kMaxSharedPerBlock ? 2 : 1) {}
};

// Issues the asynchronous copy of key rows [kv0, kv0 + rows) of one kv head into a padded
// tile (16-byte copies; rows past `rows` are zeroed with plain stores) and commits the batch.
__device__ inline void load_tile_async(bf16* tile, const bf16* src, std::int64_t kv0, int rows,
                                       int heads, int head, int d) {
  const int vectors_per_row = d / 8, ld = d + kBf16Pad;
  for (int i = threadIdx.x; i < kBlockN * vectors_per_row; i += blockDim.x) {
    const int r = i / vectors_per_row, c = (i % vectors_per_row) * 8;
    if (r < rows) {
      __pipeline_memcpy_async(tile + r * ld + c, src + ((kv0 + r) * heads + head) * d + c, 16);
    } else {
      *reinterpret_cast<uint4*>(tile + r * ld + c) = make_uint4(0, 0, 0, 0);
    }
  }
}

// GQA packing: the 64 query slots of a block are R rows x Hb query heads of one kv head
// (Hb = min(group, 64), R = 64 / Hb), slot i = (row i / Hb, head i % Hb), so each K/V tile a
// block stages serves every query head of its group at once. Without GQA (group 1) a block is
// 64 rows of one head.
struct QuerySlots {
  int heads_per_block, rows_per_block, head_chunks;
  __host__ __device__ QuerySlots(int q_heads, int kv_heads) {
    const int group = q_heads / kv_heads;
    heads_per_block = group < kBlockM ? group : kBlockM;
    rows_per_block = kBlockM / heads_per_block;
    head_chunks = (group + heads_per_block - 1) / heads_per_block;
  }
};

// The query rows of a block's slots: slot i holds row q_begin + i / hb of head h0 + i % hb
// (zero past `rows` rows or `heads` heads). One slot's d values are contiguous, and so are a
// row's consecutive heads: 16-byte copies.
__device__ inline void load_query_slots(bf16* tile, const bf16* q, std::int64_t q_begin, int rows,
                                        int hb, int heads, int q_heads, int h0, int d) {
  const int vectors_per_row = d / 8, ld = d + kBf16Pad;
  for (int i = threadIdx.x; i < kBlockM * vectors_per_row; i += blockDim.x) {
    const int slot = i / vectors_per_row, c = (i % vectors_per_row) * 8;
    const int r = slot / hb, hh = slot % hb;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < rows && hh < heads)
      value = *reinterpret_cast<const uint4*>(q + ((q_begin + r) * q_heads + h0 + hh) * d + c);
    *reinterpret_cast<uint4*>(tile + slot * ld + c) = value;
  }
}

__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(AttentionShape shape, const bf16* q, const bf16* k, const bf16* v,
                             float* out, float* lse) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  const int d = shape.head_dim, ld_h = d + kBf16Pad, ld_s = kBlockN + kF32Pad,
            ld_p = kBlockN + kBf16Pad, ld_o = d + kF32Pad;
  const ForwardLayout at(d);
  bf16* q_tile = reinterpret_cast<bf16*>(smem + at.q);
  float* s_tile = reinterpret_cast<float*>(smem + at.s);
  bf16* p_tile = reinterpret_cast<bf16*>(smem + at.p);
  float* o_tile = reinterpret_cast<float*>(smem + at.o);
  float* row_max = reinterpret_cast<float*>(smem + at.row_max);
  float* row_sum = reinterpret_cast<float*>(smem + at.row_sum);
  float* row_scale = reinterpret_cast<float*>(smem + at.row_scale);
  int* q_pos = reinterpret_cast<int*>(smem + at.q_pos);
  // The query tile's position range and the key tile's (real rows only), for tile skipping.
  int& tile_max_q_pos = reinterpret_cast<int*>(smem + at.flags)[0];
  int& tile_min_kv_pos = reinterpret_cast<int*>(smem + at.flags)[1];
  int& tile_min_q_pos = reinterpret_cast<int*>(smem + at.flags)[2];
  int& tile_max_kv_pos = reinterpret_cast<int*>(smem + at.flags)[3];
  const int window = shape.sliding_window;

  const QuerySlots slots(shape.q_heads, shape.kv_heads);
  const int hb = slots.heads_per_block, group = shape.q_heads / shape.kv_heads;
  const int seq = blockIdx.z, kv_head = blockIdx.y / slots.head_chunks;
  const int chunk = blockIdx.y % slots.head_chunks;
  const int h0 = kv_head * group + chunk * hb, heads = min(hb, group - chunk * hb);
  const int q_begin = shape.q_cu_seqlens[seq] + blockIdx.x * slots.rows_per_block;
  const int q_end = shape.q_cu_seqlens[seq + 1];
  if (q_begin >= q_end) return;  // the whole block leaves together
  const int rows = min(slots.rows_per_block, q_end - q_begin);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const auto real_slot = [&](int slot) { return slot / hb < rows && slot % hb < heads; };

  load_query_slots(q_tile, q, q_begin, rows, hb, heads, shape.q_heads, h0, d);
  if (threadIdx.x == 0) {
    tile_max_q_pos = INT_MIN;
    tile_min_q_pos = INT_MAX;
  }
  __syncthreads();
  // Padding slots get the smallest position and padding keys the largest, so the causal test
  // kv_pos <= q_pos masks them out (attention_mask.cuh).
  for (int r = threadIdx.x; r < kBlockM; r += blockDim.x) {
    q_pos[r] = real_slot(r) ? shape.q_positions[q_begin + r / hb] : INT_MIN;
    if (real_slot(r)) {
      atomicMax(&tile_max_q_pos, q_pos[r]);
      atomicMin(&tile_min_q_pos, q_pos[r]);
    }
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }
  for (int i = threadIdx.x; i < kBlockM * ld_o; i += blockDim.x) o_tile[i] = 0.0f;

  const int kv_end = shape.kv_cu_seqlens[seq + 1];
  // The first key tile at or after `from` that some query of this block sees (kv_end: none);
  // its positions are left in `positions`. Every thread runs it (it holds barriers).
  const auto next_visible = [&](int from, int* positions) {
    for (int kv0 = from; kv0 < kv_end; kv0 += kBlockN) {
      const int cols = min(kBlockN, kv_end - kv0);
      __syncthreads();  // the bounds and `positions` are free again
      if (threadIdx.x == 0) {
        tile_min_kv_pos = INT_MAX;
        tile_max_kv_pos = INT_MIN;
      }
      __syncthreads();
      for (int c = threadIdx.x; c < kBlockN; c += blockDim.x) {
        positions[c] = c < cols ? shape.kv_positions[kv0 + c] : INT_MAX;
        if (c < cols) {
          atomicMin(&tile_min_kv_pos, positions[c]);
          atomicMax(&tile_max_kv_pos, positions[c]);
        }
      }
      __syncthreads();
      // Visible unless every key is in every query's future or a window or more behind.
      if (!tile_hidden(tile_min_q_pos, tile_max_q_pos, tile_min_kv_pos, tile_max_kv_pos, window))
        return kv0;
    }
    return kv_end;
  };
  const auto stage = [&](int b) { return reinterpret_cast<bf16*>(smem + at.k[b]); };
  const auto v_stage = [&](int b) { return reinterpret_cast<bf16*>(smem + at.v[b]); };
  const auto positions_of = [&](int b) { return reinterpret_cast<int*>(smem + at.kv_pos[b]); };
  const auto issue = [&](int kv0, int b) {
    const int cols = min(kBlockN, kv_end - kv0);
    load_tile_async(stage(b), k, kv0, cols, shape.kv_heads, kv_head, d);
    load_tile_async(v_stage(b), v, kv0, cols, shape.kv_heads, kv_head, d);
    __pipeline_commit();
  };
  int buffer = 0;
  int kv0 = next_visible(shape.kv_cu_seqlens[seq], positions_of(0));
  if (kv0 < kv_end) issue(kv0, 0);
  while (kv0 < kv_end) {
    // Two stages: find and start the next visible tile before computing this one.
    int next = kv_end;
    if (at.stages == 2) {
      next = next_visible(kv0 + kBlockN, positions_of(1 - buffer));
      if (next < kv_end) issue(next, 1 - buffer);
    }
    __pipeline_wait_prior(next < kv_end ? 1 : 0);  // this tile's batch has landed
    __syncthreads();
    const bf16* k_tile = stage(buffer);
    const bf16* v_tile = v_stage(buffer);
    const int* kv_pos = positions_of(buffer);

    // S = Q K^T (K read column-major is K^T).
    mma_tile<wmma::row_major, wmma::col_major>(s_tile, ld_s, q_tile, ld_h, k_tile, ld_h, kBlockM,
                                               kBlockN, d, false);
    __syncthreads();

    // Online softmax, one warp per row: new running max, P = exp(S·scale − max) in bf16, the
    // running sum of the ROUNDED P (the values the P·V product uses), and the factor that
    // rescales the earlier output.
    for (int r = warp; r < kBlockM; r += kWarps) {
      float score[kBlockN / 32];
      float tile_max = -INFINITY;
      for (int j = 0; j < kBlockN / 32; ++j) {
        const int c = lane + 32 * j;
        score[j] = key_visible(kv_pos[c], q_pos[r], window) ? s_tile[r * ld_s + c] * shape.scale
                                                            : -INFINITY;
        tile_max = fmaxf(tile_max, score[j]);
      }
      const float old_max = row_max[r];
      const float new_max = fmaxf(old_max, detail::warp_max(tile_max));
      float sum = 0.0f;
      for (int j = 0; j < kBlockN / 32; ++j) {
        const bf16 p = __float2bfloat16_rn(score[j] == -INFINITY ? 0.0f : expf(score[j] - new_max));
        p_tile[r * ld_p + lane + 32 * j] = p;
        sum += __bfloat162float(p);
      }
      sum = detail::warp_sum(sum);
      if (lane == 0) {
        const float alpha = new_max == -INFINITY ? 1.0f : expf(old_max - new_max);
        row_scale[r] = alpha;
        row_sum[r] = row_sum[r] * alpha + sum;
        row_max[r] = new_max;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kBlockM * d; i += blockDim.x)
      o_tile[(i / d) * ld_o + i % d] *= row_scale[i / d];
    __syncthreads();
    // O += P V.
    mma_tile<wmma::row_major, wmma::row_major>(o_tile, ld_o, p_tile, ld_p, v_tile, ld_h, kBlockM, d,
                                               kBlockN, true);
    __syncthreads();  // done with this stage before it is loaded again
    if (at.stages == 1) {
      next = next_visible(kv0 + kBlockN, positions_of(0));
      if (next < kv_end) issue(next, 0);
    } else {
      buffer = 1 - buffer;
    }
    kv0 = next;
  }
  __syncthreads();
  // Slot r is query row q_begin + r / hb of head h0 + r % hb.
  const auto row_head = [&](int r) {
    return static_cast<std::int64_t>(q_begin + r / hb) * shape.q_heads + h0 + r % hb;
  };
  for (int i = threadIdx.x; i < kBlockM * d; i += blockDim.x) {
    const int r = i / d, c = i % d;
    if (!real_slot(r)) continue;
    const float l = row_sum[r];
    out[row_head(r) * d + c] = l > 0.0f ? o_tile[r * ld_o + c] / l : 0.0f;
  }
  for (int r = threadIdx.x; r < kBlockM; r += blockDim.x) {
    if (!real_slot(r)) continue;
    const float l = row_sum[r];
    lse[row_head(r)] = l > 0.0f ? row_max[r] + logf(l) : -INFINITY;
  }
}

}  // namespace dyncp::kernels::attention_detail::forward
