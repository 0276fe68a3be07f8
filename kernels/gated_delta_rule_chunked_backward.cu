// The chunked gated delta rule's exact backward on the device: the reverse-mode derivative of
// the forward's matrix products (lib/ops/gated_delta_rule_chunk_cpu.cpp derives each line).
// Given every chunk's incoming state S (stored by the forward or recomputed by a state-only
// forward pass):
//
//  prepare (gated_delta_rule_chunked.cu) again, with K Kᵀ ⊙ Γ and T = L⁻¹ kept;
//  reverse state (serial over a sequence's chunks in reverse, parallel over sequences, value
//    heads and 64-column blocks, as the forward's): dS', the gradient of each chunk's outgoing
//    state, stored; dV' = e^{γ_C − γ} K dS' + Mᵀ dO, dS = e^{γ_C} dS' + Qeᵀ dO − Wᵀ dV'; four
//    products per step;
//  chunk (parallel over every chunk and value head): with S and dS' known, the whole of the
//    chunk's backward: 16 products of C×C×d or C×d×d and the element-wise factors, giving dq and
//    dk per value head (summed over the value heads of each key head by a last kernel, in head
//    order), dv, dβ and dg. Its C×d intermediates live in a per-block slot of global scratch
//    (at most kGatedDeltaRuleChunkedBackwardBlocks blocks loop over the chunks).
#include <string>

#include "core/error.hpp"
#include "gated_delta_rule_chunk.cuh"
#include "ops/gated_delta_rule_scratch.hpp"

namespace dyncp::kernels {
namespace chunked_detail {
namespace {

struct ReverseArgs {
  const float *dout, *d_final_state;
  float *d_states, *d_initial_state;
};

__global__ void __launch_bounds__(kThreads)
    state_backward_kernel(GatedDeltaRuleArgs a, Prepared p, ReverseArgs r) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  Carve carve{smem};
  const Staging st = take_staging(carve);
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim, C = a.chunk;
  float* d_state = carve.take<float>(dk * kColumns);
  float* d_v_new = carve.take<float>(kMaxChunk * kColumns);
  float* scaled = carve.take<float>(kMaxChunk * kColumns);
  const std::int64_t tiles = (dv + kColumns - 1) / kColumns;
  const std::int64_t s = blockIdx.x / (hv * tiles), h = blockIdx.x / tiles % hv;
  const std::int64_t col0 = blockIdx.x % tiles * kColumns;
  const int nc = static_cast<int>(dv - col0 < kColumns ? dv - col0 : kColumns);
  const bool tc = a.tensor_cores;
  const std::int64_t state_size = dk * dv, qk_ld = a.key_heads * dk;
  const std::int64_t kh = h / (hv / a.key_heads), home = (s * hv + h) * state_size + col0;
  for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
    const int row = i / nc, j = i % nc;
    d_state[row * kColumns + j] =
        r.d_final_state != nullptr ? r.d_final_state[home + row * dv + j] : 0.0f;
  }
  __syncthreads();
  const std::int64_t begin = a.cu_seqlens[s], end = a.cu_seqlens[s + 1];
  for (std::int64_t ci = (end - begin + C - 1) / C - 1; ci >= 0; --ci) {
    const std::int64_t gc = a.first_chunk[s] + ci, t0 = begin + ci * C;
    const int c = static_cast<int>(end - t0 < C ? end - t0 : C);
    const std::int64_t row0 = t0 * hv + h;
    const float* k_rows = a.k + (t0 * a.key_heads + kh) * dk;
    const float* q_rows = a.q + (t0 * a.key_heads + kh) * dk;
    const float* dout = r.dout + row0 * dv + col0;
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      const int row = i / nc, j = i % nc;
      r.d_states[(gc * hv + h) * state_size + col0 + row * dv + j] = d_state[row * kColumns + j];
    }
    // dV' = e^{γ_C − γ} K dS' + Mᵀ dO
    block_mm(d_v_new, kColumns, rows(k_rows, qk_ld), rows(d_state, kColumns), c, nc,
             static_cast<int>(dk), 1.0f, false, tc, st);
    const float last = p.gamma[row0 + (c - 1) * hv];
    for (int i = threadIdx.x; i < c * nc; i += blockDim.x) {
      const int t = i / nc, j = i % nc;
      const float gamma = p.gamma[row0 + t * hv];
      d_v_new[t * kColumns + j] *= expf(last - gamma);
      scaled[t * kColumns + j] = a.scale * expf(gamma) * dout[t * hv * dv + j];
    }
    __syncthreads();
    block_mm(d_v_new, kColumns, transposed(p.m + row0 * C, hv * C), rows(dout, hv * dv), c, nc, c,
             1.0f, true, tc, st);
    // dS = e^{γ_C} dS' + Qᵀ (e^γ scale dO) − Wᵀ dV'
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      d_state[i / nc * kColumns + i % nc] *= expf(last);
    }
    __syncthreads();
    block_mm(d_state, kColumns, transposed(q_rows, qk_ld), rows(scaled, kColumns),
             static_cast<int>(dk), nc, c, 1.0f, true, tc, st);
    block_mm(d_state, kColumns, transposed(p.w + row0 * dk, hv * dk), rows(d_v_new, kColumns),
             static_cast<int>(dk), nc, c, -1.0f, true, tc, st);
  }
  if (r.d_initial_state != nullptr) {
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      const int row = i / nc, j = i % nc;
      r.d_initial_state[home + row * dv + j] = d_state[row * kColumns + j];
    }
  }
}

struct ChunkGrads {
  const float *chunk_states, *d_states, *dout;
  float *dq_head, *dk_head, *dv, *dg, *dbeta;  // dq / dk per value head
  float* slots;
};

// A block's slot of global scratch: the chunk's C×d intermediates.
struct Slot {
  float *u, *v_new, *d_v_new, *d_bv;     // [C][dv]
  float *d_kd, *d_q, *d_w, *d_bk, *d_k;  // [C][dk]
};

// One chunk's backward: where everything lives, and the shared-memory vectors and squares.
struct ChunkWork {
  Prepared p;
  ChunkGrads g;
  Slot w;
  Staging st;
  float *gamma, *beta, *d_gamma, *d_beta, *xi, *partial;  // [C] ([kThreads] partial)
  float *kkg, *inverse, *d_m, *d_a;                       // [C][kLdSquare]
  const float *k_rows, *q_rows, *v_rows, *dout_rows, *state, *d_state;
  std::int64_t row0;
  int c;
};

// dγ_t += Σ_s E_ts − Σ_r E_rt: E_ts enters γ_t with + and γ_s with − (Γ_ts = e^{γ_t − γ_s}).
__device__ inline void balance_gates(const ChunkWork& x) {
  for (int t = threadIdx.x; t < x.c; t += blockDim.x) {
    float row = 0, column = 0;
    for (int s = 0; s < x.c; ++s) {
      row += x.kkg[t * kLdSquare + s];
      column += x.kkg[s * kLdSquare + t];
    }
    x.d_gamma[t] += row - column;
  }
  __syncthreads();
}

// V', dKd, dV', dQ (from O and S' = e^{γ_C} S + Kdᵀ V'), their gate terms, and dM.
__device__ inline void state_terms(const GatedDeltaRuleArgs& a, const ChunkWork& x) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim, C = a.chunk;
  const std::int64_t qk_ld = a.key_heads * dk;
  const int c = x.c, ik = static_cast<int>(dk), iv = static_cast<int>(dv);
  const bool tc = a.tensor_cores;
  for (int i = threadIdx.x; i < c * iv; i += blockDim.x) x.w.v_new[i] = x.w.u[i];
  __syncthreads();
  block_mm(x.w.v_new, dv, rows(x.p.w + x.row0 * dk, hv * dk), rows(x.state, dv), c, iv, ik, -1.0f,
           true, tc, x.st);
  block_mm(x.w.d_kd, dk, rows(x.w.v_new, dv), transposed(x.d_state, dv), c, ik, iv, 1.0f, false, tc,
           x.st);
  block_mm(x.w.d_v_new, dv, rows(x.k_rows, qk_ld), rows(x.d_state, dv), c, iv, ik, 1.0f, false, tc,
           x.st);
  const float last = x.gamma[c - 1];
  for (int i = threadIdx.x; i < c * iv; i += blockDim.x)
    x.w.d_v_new[i] *= expf(last - x.gamma[i / iv]);
  float part = 0;
  for (std::int64_t i = threadIdx.x; i < dk * dv; i += blockDim.x)
    part += x.state[i] * x.d_state[i];
  x.partial[threadIdx.x] = part;
  for (int t = threadIdx.x; t < c; t += blockDim.x) {
    const float decay = expf(last - x.gamma[t]);
    float dot = 0;
    for (int i = 0; i < ik; ++i) dot += x.w.d_kd[t * dk + i] * x.k_rows[t * qk_ld + i];
    x.xi[t] = decay * dot;
    x.d_gamma[t] -= x.xi[t];
    for (int i = 0; i < ik; ++i) x.w.d_k[t * dk + i] = decay * x.w.d_kd[t * dk + i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) total += x.partial[i];
    float sum = expf(last) * total;
    for (int t = 0; t < c; ++t) sum += x.xi[t];
    x.d_gamma[c - 1] += sum;
  }
  __syncthreads();
  block_mm(x.w.d_q, dk, rows(x.dout_rows, hv * dv), transposed(x.state, dv), c, ik, iv, 1.0f, false,
           tc, x.st);
  block_mm(x.w.d_v_new, dv, transposed(x.p.m + x.row0 * C, hv * C), rows(x.dout_rows, hv * dv), c,
           iv, c, 1.0f, true, tc, x.st);
  block_mm(x.d_m, kLdSquare, rows(x.dout_rows, hv * dv), transposed(x.w.v_new, dv), c, c, iv, 1.0f,
           false, tc, x.st);
  for (int t = threadIdx.x; t < c; t += blockDim.x) {
    const float e = expf(x.gamma[t]);
    float dot = 0;
    for (int i = 0; i < ik; ++i) dot += x.w.d_q[t * dk + i] * (a.scale * x.q_rows[t * qk_ld + i]);
    x.d_gamma[t] += e * dot;
    for (int i = 0; i < ik; ++i) x.w.d_q[t * dk + i] *= e;
  }
  __syncthreads();
}

// dW, the UT transform's adjoints dBv = Tᵀ dV', dBk = Tᵀ dW and dA, and the β V / β e^γ K terms.
__device__ inline void solve_terms(const GatedDeltaRuleArgs& a, const ChunkWork& x) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim;
  const std::int64_t qk_ld = a.key_heads * dk;
  const int c = x.c, ik = static_cast<int>(dk), iv = static_cast<int>(dv);
  const bool tc = a.tensor_cores;
  const View inverse_t = transposed(x.inverse, kLdSquare);
  block_mm(x.w.d_w, dk, rows(x.w.d_v_new, dv), transposed(x.state, dv), c, ik, iv, -1.0f, false, tc,
           x.st);
  block_mm(x.w.d_bv, dv, inverse_t, rows(x.w.d_v_new, dv), c, iv, c, 1.0f, false, tc, x.st);
  block_mm(x.w.d_bk, dk, inverse_t, rows(x.w.d_w, dk), c, ik, c, 1.0f, false, tc, x.st);
  block_mm(x.d_a, kLdSquare, rows(x.w.d_bv, dv), transposed(x.w.u, dv), c, c, iv, -1.0f, false, tc,
           x.st);
  block_mm(x.d_a, kLdSquare, rows(x.w.d_bk, dk), transposed(x.p.w + x.row0 * dk, hv * dk), c, c, ik,
           -1.0f, true, tc, x.st);
  for (int t = threadIdx.x; t < c; t += blockDim.x) {
    const float bt = x.beta[t], e = expf(x.gamma[t]);
    float bk_dot_k = 0, bv_dot_v = 0;
    for (int i = 0; i < ik; ++i) bk_dot_k += x.w.d_bk[t * dk + i] * x.k_rows[t * qk_ld + i];
    for (int j = 0; j < iv; ++j) bv_dot_v += x.w.d_bv[t * dv + j] * x.v_rows[t * hv * dv + j];
    x.d_beta[t] += bv_dot_v + e * bk_dot_k;
    x.d_gamma[t] += bt * e * bk_dot_k;
    for (int i = 0; i < ik; ++i) x.w.d_k[t * dk + i] += bt * e * x.w.d_bk[t * dk + i];
    for (int j = 0; j < iv; ++j) x.g.dv[(x.row0 + t * hv) * dv + j] = bt * x.w.d_bv[t * dv + j];
  }
  __syncthreads();
}

// A = strict_lower(β K Kᵀ ⊙ Γ) and M = Q̃ Kᵀ ⊙ Γ: their β, γ terms and dK, dQ products.
__device__ inline void gate_terms(const GatedDeltaRuleArgs& a, const ChunkWork& x) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, C = a.chunk, qk_ld = a.key_heads * dk;
  const int c = x.c, ik = static_cast<int>(dk), ld = kLdSquare;
  const bool tc = a.tensor_cores;
  for (int t = threadIdx.x; t < c; t += blockDim.x) {
    const float bt = x.beta[t];
    for (int s = 0; s < c; ++s) {
      const float da = x.d_a[t * ld + s], kk = x.kkg[t * ld + s];
      if (s < t) {
        x.d_beta[t] += da * kk;
        x.kkg[t * ld + s] = da * bt * kk;  // becomes E for balance_gates
        x.d_a[t * ld + s] = da * bt * expf(x.gamma[t] - x.gamma[s]);
      } else {
        x.kkg[t * ld + s] = 0.0f;
        x.d_a[t * ld + s] = 0.0f;
      }
    }
  }
  __syncthreads();
  balance_gates(x);
  block_mm(x.w.d_k, dk, rows(x.d_a, ld), rows(x.k_rows, qk_ld), c, ik, c, 1.0f, true, tc, x.st);
  block_mm(x.w.d_k, dk, transposed(x.d_a, ld), rows(x.k_rows, qk_ld), c, ik, c, 1.0f, true, tc,
           x.st);
  for (int t = threadIdx.x; t < c; t += blockDim.x) {
    for (int s = 0; s < c; ++s) {
      const float dm = x.d_m[t * ld + s];
      x.kkg[t * ld + s] = dm * x.p.m[(x.row0 + t * hv) * C + s];
      x.d_m[t * ld + s] = s <= t ? dm * expf(x.gamma[t] - x.gamma[s]) : 0.0f;
    }
  }
  __syncthreads();
  balance_gates(x);
  block_mm(x.w.d_q, dk, rows(x.d_m, ld), rows(x.k_rows, qk_ld), c, ik, c, 1.0f, true, tc, x.st);
  block_mm(x.w.d_k, dk, transposed(x.d_m, ld), rows(x.q_rows, qk_ld), c, ik, c, a.scale, true, tc,
           x.st);
}

__device__ inline void write_chunk(const GatedDeltaRuleArgs& a, const ChunkWork& x) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim;
  if (threadIdx.x == 0) {
    float running = 0;
    for (int t = x.c - 1; t >= 0; --t) {
      running += x.d_gamma[t];
      x.g.dg[x.row0 + t * hv] = running;
      x.g.dbeta[x.row0 + t * hv] = x.d_beta[t];
    }
  }
  for (std::int64_t i = threadIdx.x; i < x.c * dk; i += blockDim.x) {
    const std::int64_t t = i / dk, col = i % dk, at = (x.row0 + t * hv) * dk + col;
    x.g.dq_head[at] = a.scale * x.w.d_q[i];
    x.g.dk_head[at] = x.w.d_k[i];
  }
  __syncthreads();
}

__host__ __device__ inline std::int64_t slot_floats(const GatedDeltaRuleArgs& a) {
  return a.chunk * (4 * a.value_dim + 5 * a.key_dim);
}

__global__ void __launch_bounds__(kThreads)
    chunk_backward_kernel(GatedDeltaRuleArgs a, Prepared p, ChunkGrads g) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  Carve carve{smem};
  ChunkWork x{};
  x.p = p;
  x.g = g;
  x.st = take_staging(carve);
  const PrepareSmem sm = take_prepare(carve);
  x.gamma = sm.gamma;
  x.beta = sm.beta;
  x.kkg = sm.kkg;
  x.inverse = sm.inverse;
  x.d_gamma = carve.take<float>(kMaxChunk);
  x.d_beta = carve.take<float>(kMaxChunk);
  x.xi = carve.take<float>(kMaxChunk);
  x.partial = carve.take<float>(kThreads);
  x.d_m = carve.take<float>(kMaxChunk * kLdSquare);
  x.d_a = carve.take<float>(kMaxChunk * kLdSquare);
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim, C = a.chunk;
  float* slot = g.slots + blockIdx.x * slot_floats(a);
  x.w.u = slot;
  x.w.v_new = slot + C * dv;
  x.w.d_v_new = slot + 2 * C * dv;
  x.w.d_bv = slot + 3 * C * dv;
  x.w.d_kd = slot + 4 * C * dv;
  x.w.d_q = x.w.d_kd + C * dk;
  x.w.d_w = x.w.d_q + C * dk;
  x.w.d_bk = x.w.d_w + C * dk;
  x.w.d_k = x.w.d_bk + C * dk;
  for (std::int64_t work = blockIdx.x; work < a.chunks * hv; work += gridDim.x) {
    const std::int64_t gc = work / hv, h = work % hv, kh = h / (hv / a.key_heads);
    const ChunkAt at = chunk_at(a, gc);
    x.c = at.c;
    x.row0 = at.t0 * hv + h;
    x.k_rows = a.k + (at.t0 * a.key_heads + kh) * dk;
    x.q_rows = a.q + (at.t0 * a.key_heads + kh) * dk;
    x.v_rows = a.v + x.row0 * dv;
    x.dout_rows = g.dout + x.row0 * dv;
    x.state = g.chunk_states + work * dk * dv;
    x.d_state = g.d_states + work * dk * dv;
    // The chunk's preparation again (γ, β, K Kᵀ ⊙ Γ and T in shared memory, U in the slot):
    // recomputed here, in parallel, rather than kept per token.
    PrepareOut o{};
    o.u = x.w.u;
    o.u_ld = dv;
    prepare_chunk(a, at, h, o, sm, x.st);
    for (int t = threadIdx.x; t < x.c; t += blockDim.x) {
      x.d_gamma[t] = 0.0f;
      x.d_beta[t] = 0.0f;
    }
    __syncthreads();
    state_terms(a, x);
    solve_terms(a, x);
    gate_terms(a, x);
    write_chunk(a, x);
  }
}

std::size_t chunk_shared_bytes() {
  return staging_bytes() + kPrepareSmemBytes + 4 * 512 + 2 * sizeof(float) * kMaxChunk * kLdSquare;
}

// dq[t, kh] = Σ over the value heads of key head kh, in head order.
__global__ void sum_key_heads_kernel(const float* per_value_head, float* out, std::int64_t tokens,
                                     std::int64_t key_heads, std::int64_t heads_per_key,
                                     std::int64_t key_dim) {
  const std::int64_t n = tokens * key_heads * key_dim;
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx % key_dim, row = idx / key_dim;
    const float* src = per_value_head + row * heads_per_key * key_dim + i;
    float sum = 0;
    for (std::int64_t r = 0; r < heads_per_key; ++r) sum += src[r * key_dim];
    out[idx] = sum;
  }
}

ops::GatedDeltaRuleScratchShape shape_of(const GatedDeltaRuleArgs& a) {
  return {a.sequences, a.value_heads, a.key_dim, a.value_dim, a.chunk};
}

}  // namespace
}  // namespace chunked_detail

using namespace chunked_detail;

std::int64_t gated_delta_rule_chunked_backward_scratch(const GatedDeltaRuleArgs& args) {
  return ops::gated_delta_rule_chunked_backward_scratch_floats(shape_of(args), args.tokens,
                                                               args.chunks);
}

void gated_delta_rule_chunked_backward(const GatedDeltaRuleArgs& args, const float* chunk_states,
                                       const float* dout, const float* d_final_state, float* dq,
                                       float* dk, float* dv, float* dg, float* dbeta,
                                       float* d_initial_state, float* scratch,
                                       cudaStream_t stream) {
  check_chunked(args, "kernels::gated_delta_rule_chunked_backward");
  if (args.sequences * args.value_heads == 0 || args.value_dim == 0) return;
  const ops::GatedDeltaRuleScratchShape shape = shape_of(args);
  const std::int64_t blocks = ops::gated_delta_rule_chunked_backward_blocks(shape, args.chunks);
  const Prepared p = prepared_at(args, scratch, true);
  float* d_states = scratch + prepared_floats(args, true);
  float* slots = d_states + args.chunks * args.value_heads * args.key_dim * args.value_dim;
  float* dq_head = slots + blocks * slot_floats(args);
  float* dk_head = dq_head + args.tokens * args.value_heads * args.key_dim;
  if (dk_head + args.tokens * args.value_heads * args.key_dim !=
      scratch + gated_delta_rule_chunked_backward_scratch(args)) {
    core::throw_runtime_error(
        "kernels::gated_delta_rule_chunked_backward: scratch layout disagrees with "
        "ops/gated_delta_rule_scratch.hpp");
  }
  launch_prepare(args, p, stream);
  const std::size_t reverse_smem = serial_shared_bytes(args, 2);
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(state_backward_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(reverse_smem)));
  DYNCP_LAUNCH(state_backward_kernel,
               static_cast<unsigned>(args.sequences * args.value_heads * column_tiles(args)),
               kThreads, reverse_smem, stream)
  (args, p, ReverseArgs{dout, d_final_state, d_states, d_initial_state});
  DYNCP_CUDA_CHECK_LAUNCH();
  if (dv == nullptr || args.chunks == 0) return;
  const std::size_t smem = chunk_shared_bytes();
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(
      chunk_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  DYNCP_LAUNCH(chunk_backward_kernel, static_cast<unsigned>(blocks), kThreads, smem, stream)
  (args, p, ChunkGrads{chunk_states, d_states, dout, dq_head, dk_head, dv, dg, dbeta, slots});
  DYNCP_CUDA_CHECK_LAUNCH();
  const std::int64_t n = args.tokens * args.key_heads * args.key_dim;
  const std::int64_t per_key = args.value_heads / args.key_heads;
  DYNCP_LAUNCH(sum_key_heads_kernel, detail::grid_for(n), detail::kBlock, 0, stream)
  (dq_head, dq, args.tokens, args.key_heads, per_key, args.key_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
  DYNCP_LAUNCH(sum_key_heads_kernel, detail::grid_for(n), detail::kBlock, 0, stream)
  (dk_head, dk, args.tokens, args.key_heads, per_key, args.key_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
