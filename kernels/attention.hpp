#pragma once
// Varlen causal GQA flash attention on THD, the contract of lib/ops/attention.hpp: sequences
// by q/kv cu_seqlens, visibility by GLOBAL position (key j visible to query i iff same
// sequence and kv_pos[j] <= q_pos[i], and with a sliding window w > 0 also
// q_pos[i] − kv_pos[j] < w), any key block in any order, lse out (natural log, −inf and a
// zero row when a query sees no key).
//
// Our own kernel (docs/cuda.md says why): q/k/v and dout in bf16, every product on bf16
// tensor cores (WMMA 16x16x16) with fp32 accumulation, online softmax in fp32, out / lse /
// gradients in fp32. Head dim: a multiple of 16, at most 256.
//  - forward: one block per (64 query slots, kv head, sequence), the slots R rows x the query
//    heads of that kv head (GQA-packed: each K/V tile serves the whole group); K/V tiles of 64
//    rows are staged in shared memory, double-buffered with cp.async where two stages fit;
//    tiles whose smallest key position exceeds the tile's largest query position, or (window)
//    whose largest key is a window or more behind the tile's smallest query, are skipped.
//  - backward: one block per (32-key tile, kv head, sequence) owns dK/dV of its tile (summed
//    over the query heads sharing the kv head) and walks the sequence's 32-query tiles (with
//    the same skipping); dQ comes from a second kernel, one block per (32-query tile, query
//    head, sequence) that owns its rows: no atomics, the same bits run to run.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dyncp::kernels {

using bf16 = __nv_bfloat16;

struct AttentionShape {
  std::int64_t q_tokens = 0, kv_tokens = 0;
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  int num_seqs = 0;
  int max_q_rows = 0;   // max over sequences of q_cu[s+1] - q_cu[s] (sizes the grid)
  int max_kv_rows = 0;  // likewise for keys
  const std::int32_t* q_cu_seqlens = nullptr;   // device, [S + 1]
  const std::int32_t* kv_cu_seqlens = nullptr;  // device, [S + 1]
  const std::int32_t* q_positions = nullptr;    // device, [Tq]
  const std::int32_t* kv_positions = nullptr;   // device, [Tk]
  float scale = 1.0f;
  int sliding_window = 0;  // > 0: a query sees only the keys fewer than this many positions back
};

// q [Tq, Hq, d], k / v [Tk, Hkv, d] bf16; out [Tq, Hq, d] and lse [Tq, Hq] fp32 (overwrite).
void attention_forward(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v,
                       float* out, float* lse, cudaStream_t stream);

// dout [Tq, Hq, d] bf16; out / lse from the forward over ALL keys (merged when the keys come
// in blocks). dq [Tq, Hq, d] fp32: ALWAYS accumulates (zero it first for overwrite);
// dk / dv [Tk, Hkv, d] fp32: overwrite, or accumulate when accumulate_dkv.
// scratch_d: Tq · Hq floats (D = rowsum(dout ⊙ out)).
void attention_backward(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* dout, const float* out, const float* lse, float* dq, float* dk,
                        float* dv, bool accumulate_dkv, float* scratch_d, cudaStream_t stream);

// fp32 operands (kernels/attention_f32.cu: exact, not fast). Same layout and lse rules;
// dq overwrites unless accumulate_dq; dk / dv ALWAYS accumulate (zero them for overwrite).
void attention_forward_f32(const AttentionShape& shape, const float* q, const float* k,
                           const float* v, float* out, float* lse, cudaStream_t stream);
void attention_backward_f32(const AttentionShape& shape, const float* q, const float* k,
                            const float* v, const float* dout, const float* out, const float* lse,
                            float* dq, bool accumulate_dq, float* dk, float* dv,
                            cudaStream_t stream);

// ops::attention_merge on fp32 (the CP ring folds each key block's partial result into the
// accumulated one): rows = Tq * Hq rows of head_dim values and one lse each, in place.
void attention_merge_f32(float* out_acc, float* lse_acc, const float* out_part,
                         const float* lse_part, std::int64_t rows, std::int64_t head_dim,
                         cudaStream_t stream);

}  // namespace dyncp::kernels
