// The gated delta rule token by token (ops/gated_delta_rule.hpp), forward and exact backward.
//
// Forward: one block per (sequence, value head), thread j owns column j of the dk×dv state (in
// registers / local memory): u_j = α Σ_i S_ij k_i, δ_j = β (v_j − u_j), S_ij = α S_ij + k_i δ_j
// and o_j = Σ_i S_ij (scale q_i) need nothing from the other columns, so the forward has no
// barrier at all. The incoming state of every chunk is stored (the layout of
// ops::GatedDeltaRuleSaved) for the backward.
//
// Backward, chunk by chunk in reverse from the stored chunk states, per (sequence, head):
//  A. each thread replays its column through the chunk, storing every token's state;
//  B. each thread runs the reverse sweep of its column of dS (qwen-moe.md §3.6), storing the
//     per-token pieces whose sums run over the columns (dS after the output term, δ, du and
//     the column's parts of dβ and dg) and writing dv;
//  C. after one barrier, threads over the key dim sum those pieces over the columns in a fixed
//     order: dq and dk per value head (reduced over the value heads of a key head by a last
//     kernel, in head order), dβ and dg per token.
// Two barriers per chunk, none per token. Blocks loop over the (sequence, head) pairs so the
// per-block scratch ((2C + 1)·dk·dv + 4·C·dv floats) is bounded by the grid, not the batch.
#include <string>

#include "common.cuh"
#include "core/error.hpp"
#include "hybrid.hpp"
#include "ops/gated_delta_rule_scratch.hpp"

namespace dyncp::kernels {
namespace {

constexpr int kMaxKey = kGatedDeltaRuleMaxKeyDim;

struct HeadRows {
  const float *q, *k;
  std::int64_t kh;
};

__device__ inline HeadRows head_rows(const GatedDeltaRuleArgs& a, std::int64_t t, std::int64_t h) {
  const std::int64_t kh = h / (a.value_heads / a.key_heads);
  const std::int64_t at = (t * a.key_heads + kh) * a.key_dim;
  return {a.q + at, a.k + at, kh};
}

// S_{t−1} -> S_t for column j; returns o_j = Σ_i S_t[i] (scale q_i).
__device__ inline float token_step(const GatedDeltaRuleArgs& a, float* column, std::int64_t t,
                                   std::int64_t h, int j) {
  const HeadRows rows = head_rows(a, t, h);
  const std::int64_t dk = a.key_dim;
  const float alpha = expf(a.g[t * a.value_heads + h]);
  float u = 0;
  for (std::int64_t i = 0; i < dk; ++i) {
    column[i] *= alpha;
    u += column[i] * rows.k[i];
  }
  const float delta =
      a.beta[t * a.value_heads + h] * (a.v[(t * a.value_heads + h) * a.value_dim + j] - u);
  float o = 0;
  for (std::int64_t i = 0; i < dk; ++i) {
    column[i] += rows.k[i] * delta;
    o += column[i] * (a.scale * rows.q[i]);
  }
  return o;
}

__global__ void forward_kernel(GatedDeltaRuleArgs a, float* out, float* final_state,
                               float* chunk_states) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim;
  const std::int64_t s = blockIdx.x / hv, h = blockIdx.x % hv;
  const int j = static_cast<int>(threadIdx.x);
  if (j >= dv) return;
  const std::int64_t state_size = dk * dv, at = (s * hv + h) * state_size;
  float column[kMaxKey];
  for (std::int64_t i = 0; i < dk; ++i)
    column[i] = a.initial_state != nullptr ? a.initial_state[at + i * dv + j] : 0.0f;
  const std::int64_t begin = a.cu_seqlens[s], end = a.cu_seqlens[s + 1];
  for (std::int64_t t = begin; t < end; ++t) {
    if (chunk_states != nullptr && (t - begin) % a.chunk == 0) {
      const std::int64_t chunk = a.first_chunk[s] + (t - begin) / a.chunk;
      float* saved = chunk_states + (chunk * hv + h) * state_size;
      for (std::int64_t i = 0; i < dk; ++i) saved[i * dv + j] = column[i];
    }
    const float o = token_step(a, column, t, h, j);
    if (out != nullptr) out[(t * hv + h) * dv + j] = o;
  }
  if (final_state != nullptr) {
    for (std::int64_t i = 0; i < dk; ++i) final_state[at + i * dv + j] = column[i];
  }
}

struct BackwardOutputs {
  const float *chunk_states, *dout, *d_final_state;
  float *dq_head, *dk_head, *dv, *dg, *dbeta, *d_initial_state;  // dq / dk per value head
  float* scratch;
  std::int64_t slot_floats;
};

__global__ void backward_kernel(GatedDeltaRuleArgs a, BackwardOutputs b) {
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim, C = a.chunk;
  const std::int64_t state_size = dk * dv;
  float* states = b.scratch + blockIdx.x * b.slot_floats;  // [C + 1][dk][dv]
  float* d_states = states + (C + 1) * state_size;         // [C][dk][dv]: dS after the output
  float* deltas = d_states + C * state_size;               // [C][dv]
  float* d_us = deltas + C * dv;                           // [C][dv]
  float* beta_parts = d_us + C * dv;                       // [C][dv]
  float* g_parts = beta_parts + C * dv;                    // [C][dv]
  const bool want_inputs = b.dv != nullptr;
  const int j = static_cast<int>(threadIdx.x);
  const bool active = j < dv;
  for (std::int64_t work = blockIdx.x; work < a.sequences * hv; work += gridDim.x) {
    const std::int64_t s = work / hv, h = work % hv, at = work * state_size;
    float d_state[kMaxKey];
    if (active) {
      for (std::int64_t i = 0; i < dk; ++i)
        d_state[i] = b.d_final_state != nullptr ? b.d_final_state[at + i * dv + j] : 0.0f;
    }
    const std::int64_t begin = a.cu_seqlens[s], end = a.cu_seqlens[s + 1];
    const std::int64_t chunks = (end - begin + C - 1) / C;
    for (std::int64_t ci = chunks - 1; ci >= 0; --ci) {
      const std::int64_t t0 = begin + ci * C;
      const std::int64_t c = end - t0 < C ? end - t0 : C;
      if (active) {
        // A. replay the chunk from its stored incoming state
        float column[kMaxKey];
        const float* incoming = b.chunk_states + ((a.first_chunk[s] + ci) * hv + h) * state_size;
        for (std::int64_t i = 0; i < dk; ++i) {
          column[i] = incoming[i * dv + j];
          states[i * dv + j] = column[i];
        }
        for (std::int64_t t = 0; t < c; ++t) {
          token_step(a, column, t0 + t, h, j);
          for (std::int64_t i = 0; i < dk; ++i)
            states[(t + 1) * state_size + i * dv + j] = column[i];
        }
        // B. reverse sweep of column j
        for (std::int64_t t = c - 1; t >= 0; --t) {
          const std::int64_t token = t0 + t, gate = token * hv + h;
          const HeadRows rows = head_rows(a, token, h);
          const float* prev = states + t * state_size;
          const float alpha = expf(a.g[gate]), beta = a.beta[gate];
          const float v = a.v[gate * dv + j], d_out = b.dout[gate * dv + j];
          float u = 0;
          for (std::int64_t i = 0; i < dk; ++i) {
            d_state[i] += (a.scale * rows.q[i]) * d_out;
            u += prev[i * dv + j] * rows.k[i];
          }
          u *= alpha;
          const float delta = beta * (v - u);
          float d_delta = 0;
          for (std::int64_t i = 0; i < dk; ++i) {
            d_states[t * state_size + i * dv + j] = d_state[i];
            d_delta += d_state[i] * rows.k[i];
          }
          const float d_u = -beta * d_delta;
          deltas[t * dv + j] = delta;
          d_us[t * dv + j] = d_u;
          beta_parts[t * dv + j] = d_delta * (v - u);
          if (want_inputs) b.dv[gate * dv + j] = beta * d_delta;
          float g_part = 0;
          for (std::int64_t i = 0; i < dk; ++i) {
            d_state[i] += rows.k[i] * d_u;
            g_part += d_state[i] * prev[i * dv + j];
            d_state[i] *= alpha;
          }
          g_parts[t * dv + j] = alpha * g_part;
        }
      }
      __syncthreads();
      // C. sums over the columns
      if (want_inputs) {
        for (std::int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
          for (std::int64_t t = 0; t < c; ++t) {
            const std::int64_t gate = (t0 + t) * hv + h;
            const float* cur = states + (t + 1) * state_size + i * dv;
            const float* prev = states + t * state_size + i * dv;
            const float* d_cur = d_states + t * state_size + i * dv;
            const float* d_out = b.dout + gate * dv;
            float q_sum = 0, k_sum = 0, u_sum = 0;
            for (std::int64_t col = 0; col < dv; ++col) {
              q_sum += cur[col] * d_out[col];
              k_sum += d_cur[col] * deltas[t * dv + col];
              u_sum += prev[col] * d_us[t * dv + col];
            }
            b.dq_head[gate * dk + i] = a.scale * q_sum;
            b.dk_head[gate * dk + i] = k_sum + expf(a.g[gate]) * u_sum;
          }
        }
        for (std::int64_t t = threadIdx.x; t < c; t += blockDim.x) {
          float beta_sum = 0, g_sum = 0;
          for (std::int64_t col = 0; col < dv; ++col) {
            beta_sum += beta_parts[t * dv + col];
            g_sum += g_parts[t * dv + col];
          }
          b.dbeta[(t0 + t) * hv + h] = beta_sum;
          b.dg[(t0 + t) * hv + h] = g_sum;
        }
      }
      __syncthreads();
    }
    if (active && b.d_initial_state != nullptr) {
      for (std::int64_t i = 0; i < dk; ++i) b.d_initial_state[at + i * dv + j] = d_state[i];
    }
  }
}

// dq[t, kh] = Σ over the value heads of key head kh, in head order.
__global__ void sum_key_heads_kernel(const float* per_value_head, float* out, std::int64_t tokens,
                                     std::int64_t key_heads, std::int64_t heads_per_key,
                                     std::int64_t key_dim) {
  const std::int64_t n = tokens * key_heads * key_dim;
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx % key_dim, row = idx / key_dim;  // row = t * Hk + kh
    const std::int64_t t = row / key_heads, kh = row % key_heads;
    const float* src = per_value_head + ((t * key_heads + kh) * heads_per_key) * key_dim + i;
    float sum = 0;
    for (std::int64_t r = 0; r < heads_per_key; ++r) sum += src[r * key_dim];
    out[idx] = sum;
  }
}

unsigned block_for(std::int64_t dv) {
  return static_cast<unsigned>(32 * ((dv + 31) / 32));
}

void check_dims(const GatedDeltaRuleArgs& a) {
  if (a.key_dim > kMaxKey || a.value_dim > 1024) {
    core::throw_runtime_error("kernels::gated_delta_rule: key dim " + std::to_string(a.key_dim) +
                              " / value dim " + std::to_string(a.value_dim) +
                              " exceed the kernel's limits (" + std::to_string(kMaxKey) +
                              " / 1024)");
  }
}

ops::GatedDeltaRuleScratchShape scratch_shape(const GatedDeltaRuleArgs& a) {
  return {a.sequences, a.value_heads, a.key_dim, a.value_dim, a.chunk};
}

std::int64_t backward_blocks(const GatedDeltaRuleArgs& a) {
  return ops::gated_delta_rule_backward_blocks(scratch_shape(a));
}

std::int64_t slot_floats(const GatedDeltaRuleArgs& a) {
  return ops::gated_delta_rule_backward_slot_floats(scratch_shape(a));
}

}  // namespace

void gated_delta_rule_forward(const GatedDeltaRuleArgs& args, float* out, float* final_state,
                              float* chunk_states, cudaStream_t stream) {
  check_dims(args);
  if (args.sequences * args.value_heads == 0) return;
  DYNCP_LAUNCH(forward_kernel, static_cast<unsigned>(args.sequences * args.value_heads),
               block_for(args.value_dim), 0, stream)
  (args, out, final_state, chunk_states);
  DYNCP_CUDA_CHECK_LAUNCH();
}

std::int64_t gated_delta_rule_backward_scratch(const GatedDeltaRuleArgs& args,
                                               std::int64_t tokens) {
  return ops::gated_delta_rule_backward_scratch_floats(scratch_shape(args), tokens);
}

void gated_delta_rule_backward(const GatedDeltaRuleArgs& args, std::int64_t tokens,
                               const float* chunk_states, const float* dout,
                               const float* d_final_state, float* dq, float* dk, float* dv,
                               float* dg, float* dbeta, float* d_initial_state, float* scratch,
                               cudaStream_t stream) {
  check_dims(args);
  if (args.sequences * args.value_heads == 0) return;
  const std::int64_t blocks = backward_blocks(args);
  BackwardOutputs b{};
  b.chunk_states = chunk_states;
  b.dout = dout;
  b.d_final_state = d_final_state;
  b.dq_head = scratch + blocks * slot_floats(args);
  b.dk_head = b.dq_head + tokens * args.value_heads * args.key_dim;
  b.dv = dv;
  b.dg = dg;
  b.dbeta = dbeta;
  b.d_initial_state = d_initial_state;
  b.scratch = scratch;
  b.slot_floats = slot_floats(args);
  const std::int64_t block =
      block_for(args.value_dim > args.key_dim ? args.value_dim : args.key_dim);
  DYNCP_LAUNCH(backward_kernel, static_cast<unsigned>(blocks), static_cast<unsigned>(block), 0,
               stream)
  (args, b);
  DYNCP_CUDA_CHECK_LAUNCH();
  if (dv == nullptr || tokens == 0) return;
  const std::int64_t n = tokens * args.key_heads * args.key_dim;
  const std::int64_t per_key = args.value_heads / args.key_heads;
  DYNCP_LAUNCH(sum_key_heads_kernel, detail::grid_for(n), detail::kBlock, 0, stream)
  (b.dq_head, dq, tokens, args.key_heads, per_key, args.key_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
  DYNCP_LAUNCH(sum_key_heads_kernel, detail::grid_for(n), detail::kBlock, 0, stream)
  (b.dk_head, dk, tokens, args.key_heads, per_key, args.key_dim);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
