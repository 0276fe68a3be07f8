// The gated delta rule in chunked (WY / UT-transform) form on the device, forward
// (ops/gated_delta_rule.hpp has the formulas, lib/ops/gated_delta_rule_chunk_cpu.cpp the CPU's
// same algorithm). Two kernels:
//
//  prepare (parallel over every chunk and value head): γ = cumsum(g), K Kᵀ ⊙ Γ, the inverse
//    T = (I + strict_lower(β K Kᵀ ⊙ Γ))⁻¹ (one thread per column: the columns of a unit lower
//    triangular inverse are independent), U = T β V, W = T β e^γ K and M = Q̃ Kᵀ ⊙ Γ; four
//    products of C×C×d, stored per token for the other kernels.
//  state (serial over the chunks of a sequence, parallel over sequences, value heads and
//    blocks of 64 state columns, which evolve independently): per chunk V' = U − W S,
//    O = e^γ Q̃ S + M V', S ← e^{γ_C} S + (e^{γ_C − γ} K)ᵀ V'; four products per step.
//
// Products run through block_mm: tensor cores (bf16 operands, fp32 accumulation) when
// args.tensor_cores, else fp32 sums. The state, γ and every element-wise factor stay fp32.
#include <string>

#include "core/error.hpp"
#include "gated_delta_rule_chunk.cuh"

namespace dyncp::kernels {
namespace chunked_detail {
namespace {

__device__ inline std::int64_t key_head_of(const GatedDeltaRuleArgs& a, std::int64_t h) {
  return h / (a.value_heads / a.key_heads);
}

__global__ void __launch_bounds__(kThreads) prepare_kernel(GatedDeltaRuleArgs a, Prepared p) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  Carve carve{smem};
  const Staging st = take_staging(carve);
  const PrepareSmem sm = take_prepare(carve);
  const std::int64_t hv = a.value_heads, h = blockIdx.x % hv;
  const ChunkAt at = chunk_at(a, blockIdx.x / hv);
  const std::int64_t row0 = at.t0 * hv + h;
  PrepareOut o{};
  o.gamma = p.gamma + row0;
  o.gamma_ld = hv;
  o.u = p.u != nullptr ? p.u + row0 * a.value_dim : nullptr;
  o.u_ld = hv * a.value_dim;
  o.w = p.w + row0 * a.key_dim;
  o.w_ld = hv * a.key_dim;
  o.m = p.m + row0 * a.chunk;
  o.m_ld = hv * a.chunk;
  prepare_chunk(a, at, h, o, sm, st);
}

struct ForwardOutputs {
  float *out, *final_state, *chunk_states;
};

__global__ void __launch_bounds__(kThreads)
    state_forward_kernel(GatedDeltaRuleArgs a, Prepared p, ForwardOutputs o) {
  DYNCP_DYNAMIC_SHARED(unsigned char, smem);
  Carve carve{smem};
  const Staging st = take_staging(carve);
  const std::int64_t hv = a.value_heads, dk = a.key_dim, dv = a.value_dim, C = a.chunk;
  float* state = carve.take<float>(dk * kColumns);
  float* v_new = carve.take<float>(kMaxChunk * kColumns);
  const std::int64_t tiles = (dv + kColumns - 1) / kColumns;
  const std::int64_t s = blockIdx.x / (hv * tiles), h = blockIdx.x / tiles % hv;
  const std::int64_t col0 = blockIdx.x % tiles * kColumns;
  const int nc = static_cast<int>(dv - col0 < kColumns ? dv - col0 : kColumns);
  const bool tc = a.tensor_cores;
  const std::int64_t state_size = dk * dv, qk_ld = a.key_heads * dk, kh = key_head_of(a, h);
  const std::int64_t home = (s * hv + h) * state_size + col0;
  for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
    const int r = i / nc, j = i % nc;
    state[r * kColumns + j] =
        a.initial_state != nullptr ? a.initial_state[home + r * dv + j] : 0.0f;
  }
  __syncthreads();
  const std::int64_t begin = a.cu_seqlens[s], end = a.cu_seqlens[s + 1];
  std::int64_t gc = a.first_chunk[s];
  for (std::int64_t t0 = begin; t0 < end; t0 += C, ++gc) {
    const int c = static_cast<int>(end - t0 < C ? end - t0 : C);
    const std::int64_t row0 = t0 * hv + h;
    const float* k_rows = a.k + (t0 * a.key_heads + kh) * dk;
    const float* q_rows = a.q + (t0 * a.key_heads + kh) * dk;
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      const int r = i / nc, j = i % nc;
      if (o.chunk_states != nullptr)
        o.chunk_states[(gc * hv + h) * state_size + col0 + r * dv + j] = state[r * kColumns + j];
    }
    for (int i = threadIdx.x; i < c * nc; i += blockDim.x) {
      const int t = i / nc, j = i % nc;
      v_new[t * kColumns + j] = p.u[(row0 + t * hv) * dv + col0 + j];
    }
    __syncthreads();
    // V' = U − W S
    block_mm(v_new, kColumns, rows(p.w + row0 * dk, hv * dk), rows(state, kColumns), c, nc, dk,
             -1.0f, true, tc, st);
    if (o.out != nullptr) {
      // O = e^γ Q̃ S + M V'
      float* out = o.out + row0 * dv + col0;
      block_mm(out, hv * dv, rows(q_rows, qk_ld), rows(state, kColumns), c, nc, dk, a.scale, false,
               tc, st);
      for (int i = threadIdx.x; i < c * nc; i += blockDim.x) {
        const int t = i / nc, j = i % nc;
        out[t * hv * dv + j] *= expf(p.gamma[row0 + t * hv]);
      }
      __syncthreads();
      block_mm(out, hv * dv, rows(p.m + row0 * C, hv * C), rows(v_new, kColumns), c, nc, c, 1.0f,
               true, tc, st);
    }
    // S ← e^{γ_C} S + Kᵀ (e^{γ_C − γ} V')
    const float last = p.gamma[row0 + (c - 1) * hv];
    for (int i = threadIdx.x; i < c * nc; i += blockDim.x) {
      const int t = i / nc, j = i % nc;
      v_new[t * kColumns + j] *= expf(last - p.gamma[row0 + t * hv]);
    }
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      state[i / nc * kColumns + i % nc] *= expf(last);
    }
    __syncthreads();
    block_mm(state, kColumns, transposed(k_rows, qk_ld), rows(v_new, kColumns),
             static_cast<int>(dk), nc, c, 1.0f, true, tc, st);
  }
  if (o.final_state != nullptr) {
    for (int i = threadIdx.x; i < dk * nc; i += blockDim.x) {
      const int r = i / nc, j = i % nc;
      o.final_state[home + r * dv + j] = state[r * kColumns + j];
    }
  }
}

}  // namespace

std::size_t prepare_shared_bytes() {
  return staging_bytes() + kPrepareSmemBytes;
}

void launch_prepare(const GatedDeltaRuleArgs& a, const Prepared& p, cudaStream_t stream) {
  if (a.chunks * a.value_heads == 0) return;
  const std::size_t smem = prepare_shared_bytes();
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(prepare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  DYNCP_LAUNCH(prepare_kernel, static_cast<unsigned>(a.chunks * a.value_heads), kThreads, smem,
               stream)
  (a, p);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void check_chunked(const GatedDeltaRuleArgs& a, const char* op) {
  if (a.chunk < 1 || a.chunk > kMaxChunk || a.key_dim > kGatedDeltaRuleMaxKeyDim) {
    core::throw_runtime_error(std::string(op) + ": chunk " + std::to_string(a.chunk) +
                              " / key dim " + std::to_string(a.key_dim) +
                              " outside the chunked kernels' limits (1..64 / " +
                              std::to_string(kGatedDeltaRuleMaxKeyDim) + ")");
  }
}

std::int64_t column_tiles(const GatedDeltaRuleArgs& a) {
  return (a.value_dim + kColumns - 1) / kColumns;
}

std::size_t serial_shared_bytes(const GatedDeltaRuleArgs& a, int column_buffers) {
  return staging_bytes() + (sizeof(float) * a.key_dim * kColumns + 127) / 128 * 128 +
         column_buffers * sizeof(float) * kMaxChunk * kColumns;
}

}  // namespace chunked_detail

using namespace chunked_detail;

std::int64_t gated_delta_rule_chunked_forward_scratch(const GatedDeltaRuleArgs& args) {
  return prepared_floats(args, false);
}

void gated_delta_rule_chunked_forward(const GatedDeltaRuleArgs& args, float* out,
                                      float* final_state, float* chunk_states, float* scratch,
                                      cudaStream_t stream) {
  check_chunked(args, "kernels::gated_delta_rule_chunked_forward");
  if (args.sequences * args.value_heads == 0 || args.value_dim == 0) return;
  const Prepared p = prepared_at(args, scratch, false);
  launch_prepare(args, p, stream);
  const std::size_t smem = serial_shared_bytes(args, 1);
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(
      state_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  DYNCP_LAUNCH(state_forward_kernel,
               static_cast<unsigned>(args.sequences * args.value_heads * column_tiles(args)),
               kThreads, smem, stream)
  (args, p, ForwardOutputs{out, final_state, chunk_states});
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
