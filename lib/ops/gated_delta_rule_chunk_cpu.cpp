// One chunk of the gated delta rule in matrix (WY / UT-transform) form, forward and its exact
// reverse-mode derivative. Notation of gated_delta_rule.hpp; inside a chunk of c tokens:
//   γ = cumsum(g), Γ_ts = exp(γ_t − γ_s) (s <= t, else 0), β = diag(beta), Q̃ = scale·Q
//   A = strict_lower(β (K Kᵀ ⊙ Γ)),  L = I + A
//   U = L⁻¹ β V,  W = L⁻¹ β e^γ K,  V' = U − W S
//   M = Q̃ Kᵀ ⊙ Γ,  O = e^γ Q̃ S + M V'
//   S' = e^{γ_c} S + Kdᵀ V',  Kd = e^{γ_c − γ} K
// Backward, given dO and dS' (each line the adjoint of one line above, taken in reverse):
//   dKd = V' dS'ᵀ, dV' = Kd dS', dS = e^{γ_c} dS', dγ_c += e^{γ_c} ⟨S, dS'⟩
//   dQe = dO Sᵀ, dV' += Mᵀ dO, dM = dO V'ᵀ, dS += Qeᵀ dO            (Qe = e^γ Q̃)
//   dW = −dV' Sᵀ, dS −= Wᵀ dV'
//   dBv = L⁻ᵀ dV', dBk = L⁻ᵀ dW, dA = −dBv Uᵀ − dBk Wᵀ (strict lower)  (Bv = βV, Bk = βe^γK)
//   then the element-wise factors β, e^γ, Γ give dV, dK, dQ, dβ and dγ; dg = reverse cumsum(dγ).
// Every product is a small GEMM (C×C×d or C×d×d) or a triangular solve.

#include <algorithm>
#include <cmath>

#include "ops/blas.hpp"
#include "ops/gated_delta_rule_chunk.hpp"

namespace dyncp::ops::detail {
namespace {

template <typename T>
T dot(const T* a, const T* b, std::int64_t n) {
  T sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Everything both directions need: γ, Γ, K, Q̃, K Kᵀ ⊙ Γ, U, W, V' and (with_m) M.
template <typename T>
void prepare(const ChunkRows<T>& rows, std::int64_t c, T scale, const T* state, bool with_m,
             ChunkWorkspace<T>& work) {
  const std::int64_t dk = work.key_dim, dv = work.value_dim;
  T running = 0;
  for (std::int64_t t = 0; t < c; ++t) {
    running += rows.g[t * rows.gate_stride];
    work.gamma[t] = running;
  }
  const T* gamma = work.gamma;
  for (std::int64_t t = 0; t < c; ++t) {
    for (std::int64_t s = 0; s <= t; ++s) work.decay[t * c + s] = std::exp(gamma[t] - gamma[s]);
    for (std::int64_t s = t + 1; s < c; ++s) work.decay[t * c + s] = T(0);
  }
  for (std::int64_t t = 0; t < c; ++t) {
    const T* kt = rows.k + t * rows.qk_stride;
    const T* qt = rows.q + t * rows.qk_stride;
    const T* vt = rows.v + t * rows.v_stride;
    const T bt = rows.beta[t * rows.gate_stride];
    const T decayed = bt * std::exp(gamma[t]);
    for (std::int64_t i = 0; i < dk; ++i) {
      work.keys[t * dk + i] = kt[i];
      work.queries[t * dk + i] = scale * qt[i];
      work.w[t * dk + i] = decayed * kt[i];
    }
    for (std::int64_t j = 0; j < dv; ++j) work.u[t * dv + j] = bt * vt[j];
  }
  // K Kᵀ ⊙ Γ, strict lower (A = β · this)
  blas_gemm<T>(false, true, c, c, dk, T(1), work.keys, dk, work.keys, dk, T(0), work.kkg, c);
  for (std::int64_t t = 0; t < c; ++t) {
    for (std::int64_t s = 0; s < t; ++s) work.kkg[t * c + s] *= work.decay[t * c + s];
    for (std::int64_t s = t; s < c; ++s) work.kkg[t * c + s] = T(0);
  }
  // (I + A) U = βV and (I + A) W = βe^γK by forward substitution.
  for (std::int64_t t = 1; t < c; ++t) {
    const T bt = rows.beta[t * rows.gate_stride];
    T* ut = work.u + t * dv;
    T* wt = work.w + t * dk;
    for (std::int64_t s = 0; s < t; ++s) {
      const T ats = bt * work.kkg[t * c + s];
      const T* us = work.u + s * dv;
      const T* ws = work.w + s * dk;
      for (std::int64_t j = 0; j < dv; ++j) ut[j] -= ats * us[j];
      for (std::int64_t i = 0; i < dk; ++i) wt[i] -= ats * ws[i];
    }
  }
  // V' = U − W S
  std::copy(work.u, work.u + c * dv, work.v_new);
  blas_gemm<T>(false, false, c, dv, dk, T(-1), work.w, dk, state, dv, T(1), work.v_new, dv);
  if (with_m) {
    // M = Q̃ Kᵀ ⊙ Γ (Γ is zero above the diagonal)
    blas_gemm<T>(false, true, c, c, dk, T(1), work.queries, dk, work.keys, dk, T(0), work.m, c);
    for (std::int64_t i = 0; i < c * c; ++i) work.m[i] *= work.decay[i];
  }
}

}  // namespace

template <typename T>
ChunkWorkspace<T> ChunkWorkspace<T>::allocate(core::Arena& arena, std::int64_t chunk,
                                              std::int64_t key_dim, std::int64_t value_dim,
                                              bool backward) {
  auto take = [&](std::int64_t n) {
    return arena.allocate(core::Shape{n}, core::dtype_of<T>::value).template data<T>();
  };
  ChunkWorkspace work{};
  work.chunk = chunk;
  work.key_dim = key_dim;
  work.value_dim = value_dim;
  const std::int64_t square = chunk * chunk, ck = chunk * key_dim, cv = chunk * value_dim;
  work.gamma = take(chunk);
  work.decay = take(square);
  work.kkg = take(square);
  work.m = take(square);
  work.keys = take(ck);
  work.queries = take(ck);
  work.w = take(ck);
  work.kd = take(ck);
  work.u = take(cv);
  work.v_new = take(cv);
  if (backward) {
    work.d_gamma = take(chunk);
    work.d_beta = take(chunk);
    work.d_a = take(square);
    work.d_m = take(square);
    work.d_w = take(ck);
    work.d_qe = take(ck);
    work.d_kd = take(ck);
    work.d_q = take(ck);
    work.d_k = take(ck);
    work.d_v_new = take(cv);
    work.d_bv = take(cv);
  }
  return work;
}

template <typename T>
void chunk_forward(const ChunkRows<T>& rows, std::int64_t c, T scale, T* state, T* out,
                   std::int64_t out_stride, ChunkWorkspace<T>& work) {
  const std::int64_t dk = work.key_dim, dv = work.value_dim;
  prepare(rows, c, scale, state, out != nullptr, work);
  const T* gamma = work.gamma;
  if (out != nullptr) {
    // O = e^γ Q̃ S + M V'
    for (std::int64_t t = 0; t < c; ++t) {
      const T decay = std::exp(gamma[t]);
      for (std::int64_t i = 0; i < dk; ++i) work.kd[t * dk + i] = decay * work.queries[t * dk + i];
    }
    blas_gemm<T>(false, false, c, dv, dk, T(1), work.kd, dk, state, dv, T(0), out, out_stride);
    blas_gemm<T>(false, false, c, dv, c, T(1), work.m, c, work.v_new, dv, T(1), out, out_stride);
  }
  // S' = e^{γ_c} S + Kdᵀ V'
  const T last = gamma[c - 1];
  const T total_decay = std::exp(last);
  for (std::int64_t i = 0; i < dk * dv; ++i) state[i] *= total_decay;
  for (std::int64_t t = 0; t < c; ++t) {
    const T decay = std::exp(last - gamma[t]);
    for (std::int64_t i = 0; i < dk; ++i) work.kd[t * dk + i] = decay * work.keys[t * dk + i];
  }
  blas_gemm<T>(true, false, dk, dv, c, T(1), work.kd, dk, work.v_new, dv, T(1), state, dv);
}

template <typename T>
void chunk_backward(const ChunkRows<T>& rows, std::int64_t c, T scale, const T* state,
                    const T* d_out, std::int64_t out_stride, T* d_state,
                    const ChunkGradRows<T>& grads, ChunkWorkspace<T>& work) {
  const std::int64_t dk = work.key_dim, dv = work.value_dim;
  prepare(rows, c, scale, state, true, work);
  const T* gamma = work.gamma;
  const T last = gamma[c - 1], total_decay = std::exp(last);
  T* d_gamma = work.d_gamma;
  T* d_beta = work.d_beta;
  std::fill(d_gamma, d_gamma + c, T(0));
  std::fill(d_beta, d_beta + c, T(0));

  // S' = e^{γ_c} S + Kdᵀ V'
  for (std::int64_t t = 0; t < c; ++t) {
    const T decay = std::exp(last - gamma[t]);
    for (std::int64_t i = 0; i < dk; ++i) work.kd[t * dk + i] = decay * work.keys[t * dk + i];
  }
  blas_gemm<T>(false, true, c, dk, dv, T(1), work.v_new, dv, d_state, dv, T(0), work.d_kd, dk);
  blas_gemm<T>(false, false, c, dv, dk, T(1), work.kd, dk, d_state, dv, T(0), work.d_v_new, dv);
  d_gamma[c - 1] += total_decay * dot(state, d_state, dk * dv);
  // Kd = e^{γ_c − γ} K
  for (std::int64_t t = 0; t < c; ++t) {
    const T decay = std::exp(last - gamma[t]);
    const T xi = decay * dot(work.d_kd + t * dk, work.keys + t * dk, dk);
    d_gamma[c - 1] += xi;
    d_gamma[t] -= xi;
    for (std::int64_t i = 0; i < dk; ++i) work.d_k[t * dk + i] = decay * work.d_kd[t * dk + i];
  }
  // O = Qe S + M V'
  blas_gemm<T>(false, true, c, dk, dv, T(1), d_out, out_stride, state, dv, T(0), work.d_qe, dk);
  blas_gemm<T>(true, false, c, dv, c, T(1), work.m, c, d_out, out_stride, T(1), work.d_v_new, dv);
  blas_gemm<T>(false, true, c, c, dv, T(1), d_out, out_stride, work.v_new, dv, T(0), work.d_m, c);
  // Qe = e^γ Q̃ (kd now holds Qe)
  for (std::int64_t t = 0; t < c; ++t) {
    const T decay = std::exp(gamma[t]);
    d_gamma[t] += decay * dot(work.d_qe + t * dk, work.queries + t * dk, dk);
    for (std::int64_t i = 0; i < dk; ++i) {
      work.d_q[t * dk + i] = decay * work.d_qe[t * dk + i];
      work.kd[t * dk + i] = decay * work.queries[t * dk + i];
    }
  }
  // dS = e^{γ_c} dS' + Qeᵀ dO − Wᵀ dV'  (dS' is no longer needed)
  for (std::int64_t i = 0; i < dk * dv; ++i) d_state[i] *= total_decay;
  blas_gemm<T>(true, false, dk, dv, c, T(1), work.kd, dk, d_out, out_stride, T(1), d_state, dv);
  // V' = U − W S
  blas_gemm<T>(false, true, c, dk, dv, T(-1), work.d_v_new, dv, state, dv, T(0), work.d_w, dk);
  blas_gemm<T>(true, false, dk, dv, c, T(-1), work.w, dk, work.d_v_new, dv, T(1), d_state, dv);
  // U = L⁻¹ Bv, W = L⁻¹ Bk:  dBv = L⁻ᵀ dU, dBk = L⁻ᵀ dW (back substitution; d_w becomes dBk)
  std::copy(work.d_v_new, work.d_v_new + c * dv, work.d_bv);
  for (std::int64_t s = c - 2; s >= 0; --s) {
    T* bv_s = work.d_bv + s * dv;
    T* bk_s = work.d_w + s * dk;
    for (std::int64_t t = s + 1; t < c; ++t) {
      const T ats = rows.beta[t * rows.gate_stride] * work.kkg[t * c + s];
      const T* bv_t = work.d_bv + t * dv;
      const T* bk_t = work.d_w + t * dk;
      for (std::int64_t j = 0; j < dv; ++j) bv_s[j] -= ats * bv_t[j];
      for (std::int64_t i = 0; i < dk; ++i) bk_s[i] -= ats * bk_t[i];
    }
  }
  blas_gemm<T>(false, true, c, c, dv, T(-1), work.d_bv, dv, work.u, dv, T(0), work.d_a, c);
  blas_gemm<T>(false, true, c, c, dk, T(-1), work.d_w, dk, work.w, dk, T(1), work.d_a, c);
  // Bv = β V, Bk = β e^γ K
  for (std::int64_t t = 0; t < c; ++t) {
    const T bt = rows.beta[t * rows.gate_stride], decay = std::exp(gamma[t]);
    const T* vt = rows.v + t * rows.v_stride;
    const T* bv_t = work.d_bv + t * dv;
    const T* bk_t = work.d_w + t * dk;
    const T bk_dot_k = dot(bk_t, work.keys + t * dk, dk);
    d_beta[t] += dot(bv_t, vt, dv) + decay * bk_dot_k;
    d_gamma[t] += bt * decay * bk_dot_k;
    for (std::int64_t i = 0; i < dk; ++i) work.d_k[t * dk + i] += bt * decay * bk_t[i];
    if (grads.dv != nullptr) {
      T* dv_t = grads.dv + t * rows.v_stride;
      for (std::int64_t j = 0; j < dv; ++j) dv_t[j] = bt * bv_t[j];
    }
  }
  // A_ts = β_t (K_t·K_s) Γ_ts, s < t;  d_a becomes dP = dA β_t Γ (strict lower, zero elsewhere)
  for (std::int64_t t = 0; t < c; ++t) {
    const T bt = rows.beta[t * rows.gate_stride];
    for (std::int64_t s = 0; s < t; ++s) {
      const T da = work.d_a[t * c + s], kkg = work.kkg[t * c + s];
      d_beta[t] += da * kkg;
      const T e = da * bt * kkg;
      d_gamma[t] += e;
      d_gamma[s] -= e;
      work.d_a[t * c + s] = da * bt * work.decay[t * c + s];
    }
    for (std::int64_t s = t; s < c; ++s) work.d_a[t * c + s] = T(0);
  }
  blas_gemm<T>(false, false, c, dk, c, T(1), work.d_a, c, work.keys, dk, T(1), work.d_k, dk);
  blas_gemm<T>(true, false, c, dk, c, T(1), work.d_a, c, work.keys, dk, T(1), work.d_k, dk);
  // M = (Q̃ Kᵀ) ⊙ Γ;  d_m becomes dR = dM ⊙ Γ
  for (std::int64_t i = 0; i < c * c; ++i) {
    const std::int64_t t = i / c, s = i % c;
    const T e = work.d_m[i] * work.m[i];
    d_gamma[t] += e;
    d_gamma[s] -= e;
    work.d_m[i] *= work.decay[i];
  }
  blas_gemm<T>(false, false, c, dk, c, T(1), work.d_m, c, work.keys, dk, T(1), work.d_q, dk);
  blas_gemm<T>(true, false, c, dk, c, T(1), work.d_m, c, work.queries, dk, T(1), work.d_k, dk);
  // Q̃ = scale Q; γ = cumsum(g)
  T running = 0;
  for (std::int64_t t = c - 1; t >= 0; --t) {
    running += d_gamma[t];
    if (grads.dg != nullptr) grads.dg[t * rows.gate_stride] = running;
    if (grads.dbeta != nullptr) grads.dbeta[t * rows.gate_stride] = d_beta[t];
    if (grads.dq != nullptr) {
      T* dq_t = grads.dq + t * rows.qk_stride;
      T* dk_t = grads.dk + t * rows.qk_stride;
      for (std::int64_t i = 0; i < dk; ++i) {
        dq_t[i] += scale * work.d_q[t * dk + i];
        dk_t[i] += work.d_k[t * dk + i];
      }
    }
  }
}

template struct ChunkWorkspace<float>;
template struct ChunkWorkspace<double>;
template void chunk_forward<float>(const ChunkRows<float>&, std::int64_t, float, float*, float*,
                                   std::int64_t, ChunkWorkspace<float>&);
template void chunk_forward<double>(const ChunkRows<double>&, std::int64_t, double, double*,
                                    double*, std::int64_t, ChunkWorkspace<double>&);
template void chunk_backward<float>(const ChunkRows<float>&, std::int64_t, float, const float*,
                                    const float*, std::int64_t, float*, const ChunkGradRows<float>&,
                                    ChunkWorkspace<float>&);
template void chunk_backward<double>(const ChunkRows<double>&, std::int64_t, double, const double*,
                                     const double*, std::int64_t, double*,
                                     const ChunkGradRows<double>&, ChunkWorkspace<double>&);

}  // namespace dyncp::ops::detail
