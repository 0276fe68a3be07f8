#pragma once
// Gated delta rule: the recurrence at the core of Gated DeltaNet (reference qwen-moe.md §3.4
// steps 4-5, §3.5, §3.6, §3.7), over packed sequences, with an exact backward.
//
// Per value head h (key head kh = h / (Hv / Hk): consecutive value heads share a key head, HF's
// repeat_interleave), state S ∈ R^{dk×dv}, S = S0 (zero, or the given initial state) at the
// start of every sequence; for each token t of the sequence, α_t = exp(g_t):
//   S̃ = α_t S_{t−1};  u = S̃ᵀ k_t;  δ = β_t (v_t − u);  S_t = S̃ + k_t δᵀ
//   o_t = S_tᵀ (scale · q_t)             (o_t reads the UPDATED state: token t sees itself)
// i.e. S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ. The caller passes q and k already
// L2-normalised (l2norm.hpp) and scale = 1/sqrt(dk) for the Qwen models; the op applies no
// normalisation itself, so any q, k are accepted.
//
// Two implementations of the same function:
// - recurrent: token by token, the reference. Backward stores every state of one (sequence,
//   head) in scratch ((L_max + 1)·dk·dv elements) and runs the reverse sweep of §3.6.
// - chunked (training): each sequence is cut into chunks of C = chunk_size tokens from its own
//   start (chunks never straddle sequences; the last chunk of a sequence may be shorter). Per
//   chunk, with γ_t = Σ_{s<=t} g_s inside the chunk, Γ_ts = exp(γ_t − γ_s) (s <= t, else 0):
//     A = strict_lower(diag(β) K Kᵀ ⊙ Γ),  L = I + A  (unit lower triangular)
//     U = L⁻¹ diag(β) V,  W = L⁻¹ diag(β e^γ) K     (forward substitution),  V' = U − W S
//     O = diag(e^γ) Q̃ S + (Q̃ Kᵀ ⊙ Γ, diagonal kept) V'
//     S ← e^{γ_C} S + (diag(e^{γ_C − γ}) K)ᵀ V'
//   with Q̃ = scale · Q. Backward is the exact reverse-mode derivative of these matrix
//   products, chunk by chunk in reverse from each chunk's incoming state (the formulas are in
//   gated_delta_rule_chunk_cpu.cpp): small GEMMs and one back substitution per chunk, no
//   per-token states. It equals the recurrent backward to round-off (f64: 1e-12; f32 vs f64:
//   <= 6e-7, dg 3e-5 under extreme decay). Sequential only across chunks. Only exp of
//   non-positive numbers is taken when g <= 0 (as in the models), so strong decay underflows
//   to 0 instead of overflowing.
//
// Memory. saved.chunk_states (optional) holds the INCOMING state of every chunk:
// [num_chunks, Hv, dk, dv] with num_chunks = gated_delta_rule_num_chunks(cu_seqlens, C)
// = Σ_s ceil(L_s / C), chunks in sequence order (about T/C · Hv·dk·dv elements: for the
// released models, T = 4096, C = 64, Hv = 32, dk = dv = 128, that is 33.5M elements, 2x the
// layer's value activations). When it is undefined, forward stores nothing and backward
// recomputes the chunk states of one (sequence, head) at a time into scratch (one more
// state-only forward pass: about +30% backward time, tools/bench/ops). Scratch: chunked forward
// 3C² + 4C·dk + 2C·dv (+ dk·dv); chunked backward that plus 2C² + 5C·dk + 2C·dv, plus
// ceil(L_max/C)·dk·dv when recomputing; recurrent backward (L_max + 1)·dk·dv.
//
// Initial and final states (context parallelism: a rank holding a later part of a sequence
// continues from the state its predecessors hand over). initial_state [S, Hv, dk, dv]
// (undefined = zeros) starts sequence s; final_state [S, Hv, dk, dv] (optional output) is the
// state after its last token (= the initial state for an empty sequence). In backward,
// d_final_state (optional, undefined = zero) is the gradient arriving at final_state and
// d_initial_state (optional output) the gradient of initial_state. Everything is affine in S0:
// final = P S0 + final|_{S0=0} and out = out|_{S0=0} + (linear in S0), with
// P = Π_t α_t (I − β_t k_t k_tᵀ) (dk×dk per head, latest token leftmost). P itself is
// final_state for v = 0 (dv = dk) and initial_state = identity.
//
// Shapes (T tokens, S sequences):
//   q, k: [T, Hk, dk]    v: [T, Hv, dv]    g, beta: [T, Hv]    out: [T, Hv, dv]
//   cu_seqlens: i32 [S + 1], starts at 0, non-decreasing, ends at T (empty sequences allowed)
//   Hv a multiple of Hk. One float dtype (f32 or f64) for every float tensor; state math runs
//   in that dtype.
// Gradients: dq, dk, dv, dg, dbeta, d_initial_state overwrite (dq, dk summed over the value heads
// sharing a key head); undefined ones are skipped (dq, dk, dv, dg, dbeta must all be defined
// or all undefined: the sweep produces them together). No parameters. All entry points need
// ctx.scratch; out must not alias an input.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

struct GatedDeltaRuleInputs {
  Tensor q;              // [T, Hk, dk], L2-normalised by the caller, not yet scaled
  Tensor k;              // [T, Hk, dk], L2-normalised by the caller
  Tensor v;              // [T, Hv, dv]
  Tensor g;              // [T, Hv], log decay (α = exp g)
  Tensor beta;           // [T, Hv]
  Tensor cu_seqlens;     // i32 [S + 1]
  Tensor initial_state;  // optional [S, Hv, dk, dv]; undefined = zero state
};

struct GatedDeltaRuleParams {
  double scale = 1.0;   // multiplies q (1/sqrt(dk) for Qwen3-Next / 3.5)
  int chunk_size = 64;  // chunked form only; >= 1
};

struct GatedDeltaRuleSaved {
  Tensor chunk_states;  // optional [num_chunks, Hv, dk, dv]: incoming state of every chunk
};

struct GatedDeltaRuleGrads {
  Tensor dq, dk;           // [T, Hk, dk], overwrite
  Tensor dv;               // [T, Hv, dv], overwrite
  Tensor dg, dbeta;        // [T, Hv], overwrite
  Tensor d_initial_state;  // optional [S, Hv, dk, dv], overwrite
};

// Σ_s ceil(L_s / chunk_size) over cu_seqlens (i32 [S + 1], on the host).
std::int64_t gated_delta_rule_num_chunks(const Tensor& cu_seqlens, int chunk_size);

// Chunked form (training). final_state: optional output. saved.chunk_states: optional output.
void gated_delta_rule_chunked_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                      const GatedDeltaRuleParams& params, const Tensor& out,
                                      const Tensor& final_state, GatedDeltaRuleSaved& saved);

// saved: what forward wrote (chunk_states undefined: recomputed). d_final_state: optional.
void gated_delta_rule_chunked_backward(const OpContext& ctx, const Tensor& dout,
                                       const Tensor& d_final_state, const GatedDeltaRuleInputs& in,
                                       const GatedDeltaRuleParams& params,
                                       const GatedDeltaRuleSaved& saved,
                                       const GatedDeltaRuleGrads& grads);

// Token-by-token reference (params.chunk_size unused).
void gated_delta_rule_recurrent_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                        const GatedDeltaRuleParams& params, const Tensor& out,
                                        const Tensor& final_state);

void gated_delta_rule_recurrent_backward(const OpContext& ctx, const Tensor& dout,
                                         const Tensor& d_final_state,
                                         const GatedDeltaRuleInputs& in,
                                         const GatedDeltaRuleParams& params,
                                         const GatedDeltaRuleGrads& grads);

}  // namespace dyncp::ops
