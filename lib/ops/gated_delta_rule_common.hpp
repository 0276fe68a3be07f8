#pragma once
// Shared pieces of the two gated delta rule implementations (internal to lib/ops): argument
// checks of both, and the single-token forward and reverse steps (reference qwen-moe.md §3.4
// step 5 and §3.6) of the recurrent form.
//
// State layout: S[i · dv + j], i < dk (key dim), j < dv (value dim), row-major.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "ops/gated_delta_rule.hpp"

namespace dyncp::ops::detail {

struct GatedDeltaRuleDims {
  std::int64_t tokens = 0, sequences = 0;
  std::int64_t key_heads = 0, value_heads = 0, heads_per_key = 1;
  std::int64_t key_dim = 0, value_dim = 0;
  std::int64_t max_sequence_length = 0;
};

// Checks q, k, v, g, beta, cu_seqlens, initial_state, scratch and (for the chunked form) the
// chunk size; returns the dims. Throws naming `op`.
GatedDeltaRuleDims check_gated_delta_rule_inputs(std::string_view op, const OpContext& ctx,
                                                 const GatedDeltaRuleInputs& in,
                                                 const GatedDeltaRuleParams& params, bool chunked);

// out [T, Hv, dv] (required) and final_state [S, Hv, dk, dv] (optional).
void check_gated_delta_rule_outputs(std::string_view op, const OpContext& ctx,
                                    const GatedDeltaRuleInputs& in, const GatedDeltaRuleDims& dims,
                                    const Tensor& out, const Tensor& final_state);

// dout (required), d_final_state (optional) and the gradients.
void check_gated_delta_rule_grads(std::string_view op, const OpContext& ctx,
                                  const GatedDeltaRuleInputs& in, const GatedDeltaRuleDims& dims,
                                  const Tensor& dout, const Tensor& d_final_state,
                                  const GatedDeltaRuleGrads& grads);

// One token: S_{t−1} -> S_t in place; o = scale · S_tᵀ q when o is not null. delta: dv scratch.
template <typename T>
inline void gdn_token_forward(T* state, std::int64_t key_dim, std::int64_t value_dim, const T* q,
                              const T* k, const T* v, T g, T beta, T scale, T* o, T* delta) {
  const T alpha = std::exp(g);
  // u = (α S)ᵀ k, then δ = β (v − u)
  std::fill(delta, delta + value_dim, T(0));
  for (std::int64_t i = 0; i < key_dim; ++i) {
    T* row = state + i * value_dim;
    const T ki = k[i];
    for (std::int64_t j = 0; j < value_dim; ++j) {
      row[j] *= alpha;
      delta[j] += row[j] * ki;
    }
  }
  for (std::int64_t j = 0; j < value_dim; ++j) delta[j] = beta * (v[j] - delta[j]);
  // S_t = S̃ + k δᵀ; o = scale · S_tᵀ q
  if (o != nullptr) std::fill(o, o + value_dim, T(0));
  for (std::int64_t i = 0; i < key_dim; ++i) {
    T* row = state + i * value_dim;
    const T ki = k[i];
    for (std::int64_t j = 0; j < value_dim; ++j) row[j] += ki * delta[j];
    if (o != nullptr) {
      const T qi = scale * q[i];
      for (std::int64_t j = 0; j < value_dim; ++j) o[j] += row[j] * qi;
    }
  }
}

// Per-token gradient outputs of the reverse step.
template <typename T>
struct GdnTokenGrads {
  T* dq;  // [dk], accumulated (+=): value heads sharing a key head add up
  T* dk;  // [dk], accumulated (+=)
  T* dv;  // [dv], overwritten
  T dg = 0;
  T dbeta = 0;
};

// Reverse step of §3.6 for one token. prev = S_{t−1}, cur = S_t (read only). d_state holds
// dL/dS_t on entry and dL/dS_{t−1} on exit. work: 3·dv scratch.
template <typename T>
inline void gdn_token_backward(const T* prev, const T* cur, T* d_state, std::int64_t key_dim,
                               std::int64_t value_dim, const T* q, const T* k, const T* v, T g,
                               T beta, T scale, const T* d_out, GdnTokenGrads<T>& grads, T* work) {
  const T alpha = std::exp(g);
  T* delta = work;
  T* d_delta = work + value_dim;
  T* d_u = work + 2 * value_dim;
  // 1. o = scale S_tᵀ q:  dS += scale q ⊗ dO,  dq += scale S_t dO
  for (std::int64_t i = 0; i < key_dim; ++i) {
    const T* row = cur + i * value_dim;
    T* d_row = d_state + i * value_dim;
    T dot = 0;
    for (std::int64_t j = 0; j < value_dim; ++j) dot += row[j] * d_out[j];
    grads.dq[i] += scale * dot;
    const T qi = scale * q[i];
    for (std::int64_t j = 0; j < value_dim; ++j) d_row[j] += qi * d_out[j];
  }
  // recompute u = α S_{t−1}ᵀ k (kept in d_u for now), δ = β (v − u)
  std::fill(d_u, d_u + value_dim, T(0));
  for (std::int64_t i = 0; i < key_dim; ++i) {
    const T* row = prev + i * value_dim;
    const T ki = k[i];
    for (std::int64_t j = 0; j < value_dim; ++j) d_u[j] += row[j] * ki;
  }
  T d_beta = 0;
  for (std::int64_t j = 0; j < value_dim; ++j) {
    d_u[j] *= alpha;
    delta[j] = beta * (v[j] - d_u[j]);
  }
  // 2. S_t = S̃ + k δᵀ:  dk += dS δ,  dδ = dSᵀ k
  std::fill(d_delta, d_delta + value_dim, T(0));
  for (std::int64_t i = 0; i < key_dim; ++i) {
    const T* d_row = d_state + i * value_dim;
    const T ki = k[i];
    T dot = 0;
    for (std::int64_t j = 0; j < value_dim; ++j) {
      dot += d_row[j] * delta[j];
      d_delta[j] += d_row[j] * ki;
    }
    grads.dk[i] += dot;
  }
  // 3. δ = β (v − u):  dv = β dδ,  du = −β dδ,  dβ = dδ · (v − u)
  for (std::int64_t j = 0; j < value_dim; ++j) {
    const T u = d_u[j];
    d_beta += d_delta[j] * (v[j] - u);
    grads.dv[j] = beta * d_delta[j];
    d_u[j] = -beta * d_delta[j];
  }
  // 4-5. u = S̃ᵀ k, S̃ = α S_{t−1}:  dS̃ = dS + k ⊗ du,  dk += S̃ du,  dg = ⟨dS̃, S̃⟩,
  //      dS_{t−1} = α dS̃
  T d_g = 0;
  for (std::int64_t i = 0; i < key_dim; ++i) {
    const T* row = prev + i * value_dim;
    T* d_row = d_state + i * value_dim;
    const T ki = k[i];
    T dot_du = 0, dot_ds = 0;
    for (std::int64_t j = 0; j < value_dim; ++j) {
      d_row[j] += ki * d_u[j];
      dot_du += row[j] * d_u[j];
      dot_ds += d_row[j] * row[j];
      d_row[j] *= alpha;
    }
    grads.dk[i] += alpha * dot_du;
    d_g += alpha * dot_ds;
  }
  grads.dg = d_g;
  grads.dbeta = d_beta;
}

}  // namespace dyncp::ops::detail
