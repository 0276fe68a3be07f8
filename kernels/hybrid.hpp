#pragma once
// CUDA kernels of the hybrid (Qwen3-Next / 3.5) layers and the MoE aux loss, behind the ops of
// the same names in lib/ops (same maths and argument meanings; conventions of ops.hpp). fp32
// tensors (the chunked gated delta rule's products may run on tensor cores on bf16 splits of
// them). Every reduction runs in one thread in a fixed order (no atomics): the element-wise ops
// and the aux loss sum in the CPU op's order, so under the emulated backend they agree with
// it bit for bit and a repeated step is bit-reproducible on a GPU too.
//
// Sequence boundaries (cu_seqlens, first_chunk) are DEVICE copies of the host metadata.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dyncp::kernels {

using bf16 = __nv_bfloat16;

// ops::sigmoid_gate_forward / _backward over n elements (dx / dgate may be null).
void sigmoid_gate_forward(const float* x, const float* gate, float* out, std::int64_t n,
                          cudaStream_t stream);
void sigmoid_gate_backward(const float* dout, const float* x, const float* gate, float* dx,
                           float* dgate, std::int64_t n, cudaStream_t stream);
// ops::sigmoid_row_gate_forward / _backward: x [rows, width], one gate logit per row.
void sigmoid_row_gate_forward(const float* x, const float* gate, float* out, std::int64_t rows,
                              std::int64_t width, bool accumulate, cudaStream_t stream);
void sigmoid_row_gate_backward(const float* dout, const float* x, const float* gate, float* dx,
                               float* dgate, std::int64_t rows, std::int64_t width,
                               cudaStream_t stream);

// ops::split_head_halves / merge_head_halves: packed [rows, 2·half].
void split_head_halves(const float* packed, float* first, float* second, std::int64_t rows,
                       std::int64_t half, cudaStream_t stream);
void merge_head_halves(const float* first, const float* second, float* packed, std::int64_t rows,
                       std::int64_t half, cudaStream_t stream);

// ops::gated_delta_gates_forward / _backward: [tokens, heads]; dg, dbeta, da, db, dA_log,
// ddt_bias may be null.
void gated_delta_gates_forward(const float* a, const float* b, const float* A_log,
                               const float* dt_bias, float* g, float* beta, std::int64_t tokens,
                               std::int64_t heads, cudaStream_t stream);
void gated_delta_gates_backward(const float* dg, const float* dbeta, const float* a, const float* b,
                                const float* A_log, const float* dt_bias, float* da, float* db,
                                float* dA_log, float* ddt_bias, std::int64_t tokens,
                                std::int64_t heads, cudaStream_t stream);

// ops::moe_aux_loss_statistics: an expert id outside [0, experts) stores the smallest
// offending token in *bad_token (initialise to INT32_MAX). token_is_real may be null.
void moe_aux_loss_statistics(const float* probs, const std::int32_t* expert_ids,
                             const std::int32_t* cu_seqlens, const std::uint8_t* token_is_real,
                             float* counts, float* prob_sums, std::int64_t sequences,
                             std::int64_t experts, std::int64_t top_k, std::int32_t* bad_token,
                             cudaStream_t stream);
// ops::moe_aux_loss_finish: coef_over_n = coef / N_seq; *loss (device) = the returned value;
// per_sequence: [sequences] doubles of scratch.
void moe_aux_loss_finish(const float* counts, const float* prob_sums, std::int64_t sequences,
                         std::int64_t experts, std::int64_t top_k, double coef_over_n,
                         float* grad_coeff, double* per_sequence, double* loss,
                         cudaStream_t stream);
// ops::moe_aux_loss_backward (accumulates into dlogits).
void moe_aux_loss_backward(const float* probs, const std::int32_t* cu_seqlens,
                           const std::uint8_t* token_is_real, const float* grad_coeff,
                           float* dlogits, std::int64_t sequences, std::int64_t experts,
                           float loss_scale, cudaStream_t stream);

// ops::causal_conv1d_silu_forward / _backward: x [tokens, channels], weight [channels, kernel].
// dpre: [tokens, channels] scratch (backward). dx / dweight may be null.
void causal_conv1d_silu_forward(const float* x, const float* weight, const std::int32_t* cu_seqlens,
                                float* y, std::int64_t sequences, std::int64_t tokens,
                                std::int64_t channels, std::int64_t kernel, cudaStream_t stream);
void causal_conv1d_silu_backward(const float* dy, const float* x, const float* weight,
                                 const std::int32_t* cu_seqlens, float* dx, float* dweight,
                                 float* dpre, std::int64_t sequences, std::int64_t tokens,
                                 std::int64_t channels, std::int64_t kernel, cudaStream_t stream);

// ops::l2norm_forward / _backward over rows of n (y may alias x, dx may alias dy).
void l2norm_forward(const float* x, float eps, float* y, float* inv_norm, std::int64_t rows,
                    std::int64_t n, cudaStream_t stream);
void l2norm_backward(const float* dy, const float* y, const float* inv_norm, float* dx,
                     std::int64_t rows, std::int64_t n, cudaStream_t stream);

// ops::gated_rmsnorm_forward / _backward over rows of n (dx, dz, dweight may be null; dx / dz
// may alias dy).
void gated_rmsnorm_forward(const float* x, const float* z, const float* weight, float eps, float* y,
                           float* inv_rms, std::int64_t rows, std::int64_t n, cudaStream_t stream);
void gated_rmsnorm_backward(const float* dy, const float* x, const float* z, const float* weight,
                            const float* inv_rms, float* dx, float* dz, float* dweight,
                            std::int64_t rows, std::int64_t n, cudaStream_t stream);
// The same reading x and z as bf16 storage (bf16 activations), widened exactly.
void gated_rmsnorm_forward(const bf16* x, const bf16* z, const float* weight, float eps, float* y,
                           float* inv_rms, std::int64_t rows, std::int64_t n, cudaStream_t stream);
void gated_rmsnorm_backward(const float* dy, const bf16* x, const bf16* z, const float* weight,
                            const float* inv_rms, float* dx, float* dz, float* dweight,
                            std::int64_t rows, std::int64_t n, cudaStream_t stream);

// The gated delta rule (ops::gated_delta_rule_*), token by token: one block per (sequence,
// value head), one thread per value column of the state (columns evolve independently in the
// forward). Chunk states are the incoming state of every chunk of `chunk` tokens, cut from
// each sequence's start, in the layout of ops::GatedDeltaRuleSaved.
constexpr int kGatedDeltaRuleMaxKeyDim = 256;

struct GatedDeltaRuleArgs {
  const float *q = nullptr, *k = nullptr;     // [T, Hk, dk]
  const float* v = nullptr;                   // [T, Hv, dv]
  const float *g = nullptr, *beta = nullptr;  // [T, Hv]
  const std::int32_t* cu_seqlens = nullptr;   // [S + 1]
  const std::int32_t* first_chunk = nullptr;  // [S]: the sequence's first chunk index
  const float* initial_state = nullptr;       // optional [S, Hv, dk, dv]
  std::int64_t sequences = 0, key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  int chunk = 64;
  float scale = 1.0f;
  // The chunked kernels only: T, the number of chunks (Σ_s ceil(L_s / chunk)), and whether the
  // chunk products run on tensor cores (bf16 operands, fp32 accumulation; bf16_mixed) or in
  // fp32.
  std::int64_t tokens = 0, chunks = 0;
  bool tensor_cores = false;
};

// out [T, Hv, dv] (may be null: states only), final_state and chunk_states optional.
void gated_delta_rule_forward(const GatedDeltaRuleArgs& args, float* out, float* final_state,
                              float* chunk_states, cudaStream_t stream);

// Scratch for the backward (floats), for max_rows = the longest sequence's row count.
std::int64_t gated_delta_rule_backward_scratch(const GatedDeltaRuleArgs& args, std::int64_t tokens);

// chunk_states: what forward stored (required). d_final_state, d_initial_state optional;
// dq, dk [T, Hk, dk], dv [T, Hv, dv], dg, dbeta [T, Hv] overwrite (all or none).
void gated_delta_rule_backward(const GatedDeltaRuleArgs& args, std::int64_t tokens,
                               const float* chunk_states, const float* dout,
                               const float* d_final_state, float* dq, float* dk, float* dv,
                               float* dg, float* dbeta, float* d_initial_state, float* scratch,
                               cudaStream_t stream);

// The chunked (WY / UT-transform) form, the default on the device
// (kernels/gated_delta_rule_chunked*.cu; docs/cuda.md): chunk-local products in parallel over
// every chunk and value head, only the chunk-to-chunk state recurrence serial (per sequence,
// value head and block of 64 state columns). Same outputs, chunk-state layout and gradient
// conventions as the token-by-token kernels above; chunk <= 64, key dim <= 256.
// Scratch (floats): ops/gated_delta_rule_scratch.hpp.
std::int64_t gated_delta_rule_chunked_forward_scratch(const GatedDeltaRuleArgs& args);
void gated_delta_rule_chunked_forward(const GatedDeltaRuleArgs& args, float* out,
                                      float* final_state, float* chunk_states, float* scratch,
                                      cudaStream_t stream);
std::int64_t gated_delta_rule_chunked_backward_scratch(const GatedDeltaRuleArgs& args);
void gated_delta_rule_chunked_backward(const GatedDeltaRuleArgs& args, const float* chunk_states,
                                       const float* dout, const float* d_final_state, float* dq,
                                       float* dk, float* dv, float* dg, float* dbeta,
                                       float* d_initial_state, float* scratch, cudaStream_t stream);

// ops/segment_states.hpp: walks over the segments of DeltaNet state passing, sums in double.
struct SegmentWalks {
  const std::int32_t* segments = nullptr;  // [offsets[count]]
  const std::int32_t* offsets = nullptr;   // [count + 1]
  std::int64_t count = 0, first_own = 0, end_own = 0;
  std::int64_t heads = 0, key_dim = 0, value_dim = 0;
};
// Doubles of scratch the compose kernels need.
std::int64_t segment_walk_scratch(const SegmentWalks& walks);
void compose_segment_prefixes(const SegmentWalks& walks, const float* transitions,
                              float* initial_states, double* scratch, cudaStream_t stream);
void compose_segment_suffixes(const SegmentWalks& walks, const float* transitions,
                              const float* state_grads, float* final_grads, double* scratch,
                              cudaStream_t stream);
// grads [segments, heads, dk, dv] = Σ over each segment's rows of w dout^T (cu_seqlens device).
void segment_state_grads(const float* query_maps, const float* dout, const std::int32_t* cu_seqlens,
                         float* grads, std::int64_t segments, std::int64_t heads,
                         std::int64_t key_dim, std::int64_t value_dim, cudaStream_t stream);
// dst[r * ld_dst + j] = src[r * ld_src + j], j < width (ops::copy_columns).
void copy_columns(const float* src, std::int64_t ld_src, float* dst, std::int64_t ld_dst,
                  std::int64_t rows, std::int64_t width, cudaStream_t stream);
// t [n, dk, width]: t[i, a, col + a] = 1 (ops::set_identity_columns).
void set_identity_columns(float* t, std::int64_t n, std::int64_t dk, std::int64_t width,
                          std::int64_t col, cudaStream_t stream);

}  // namespace dyncp::kernels
