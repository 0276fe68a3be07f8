#pragma once
// One chunk of the chunked gated delta rule, forward and backward in the WY / UT-transform
// matrix form (internal to lib/ops; formulas in gated_delta_rule.hpp). Instantiated for float
// and double in gated_delta_rule_chunk_cpu.cpp.

#include <cstdint>

#include "core/arena.hpp"

namespace dyncp::ops::detail {

// Where one (sequence, value head) reads its rows: pointers to the chunk's first token and the
// row strides of the packed tensors (q / k [T, Hk, dk], v [T, Hv, dv], g / beta [T, Hv]).
template <typename T>
struct ChunkRows {
  const T *q, *k, *v, *g, *beta;
  std::int64_t qk_stride, v_stride, gate_stride;
};

// Gradient rows of one chunk: dq, dk accumulate (+=: value heads sharing a key head add up);
// dv, dg, dbeta overwrite. Same strides as ChunkRows.
template <typename T>
struct ChunkGradRows {
  T *dq, *dk, *dv, *dg, *dbeta;
};

// Scratch for chunks of up to `chunk` tokens: O(C² + C (dk + dv)) elements, from the arena.
template <typename T>
struct ChunkWorkspace {
  std::int64_t chunk = 0, key_dim = 0, value_dim = 0;
  T *gamma, *decay, *kkg, *m;  // [C], [C, C] Γ, [C, C] (K Kᵀ ⊙ Γ) strict lower, [C, C] M
  T *keys, *queries, *w, *kd;  // [C, dk]: K, scale·Q, W, scratch (Kd / Qe)
  T *u, *v_new;                // [C, dv]: U, V' = U − W S
  // backward only
  T *d_gamma, *d_beta;               // [C]
  T *d_a, *d_m;                      // [C, C]
  T *d_w, *d_qe, *d_kd, *d_q, *d_k;  // [C, dk]
  T *d_v_new, *d_bv;                 // [C, dv]

  static ChunkWorkspace allocate(core::Arena& arena, std::int64_t chunk, std::int64_t key_dim,
                                 std::int64_t value_dim, bool backward);
};

// Forward over c tokens from the incoming state (updated in place to the outgoing state).
// Writes the outputs to out (row stride out_stride) unless out is null.
template <typename T>
void chunk_forward(const ChunkRows<T>& rows, std::int64_t c, T scale, T* state, T* out,
                   std::int64_t out_stride, ChunkWorkspace<T>& work);

// Backward of chunk_forward. state: the chunk's INCOMING state (read only). d_state: dL/d
// (outgoing state) on entry, dL/d(incoming state) on exit. d_out: the chunk's first output
// gradient row (row stride out_stride).
template <typename T>
void chunk_backward(const ChunkRows<T>& rows, std::int64_t c, T scale, const T* state,
                    const T* d_out, std::int64_t out_stride, T* d_state,
                    const ChunkGradRows<T>& grads, ChunkWorkspace<T>& work);

}  // namespace dyncp::ops::detail
