#pragma once
// CUDA kernels behind the ops in lib/ops (same maths; each function names its lib/ops
// counterpart). Raw device pointers, row-major, fp32 unless a bf16 (__nv_bfloat16) type is
// spelled out; every call is enqueued on `stream` and returns without synchronising.
// Gradient conventions follow lib/ops/context.hpp: parameter gradients accumulate, input
// gradients overwrite unless an `accumulate` flag says otherwise. Where the CPU op sums in a
// fixed order and the kernel uses atomics (embedding and rmsnorm weight gradients), results
// agree to fp32 rounding but are not bit-reproducible run to run (docs/cuda.md).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dyncp::kernels {

using bf16 = __nv_bfloat16;

// ops::convert: bf16 <-> f32 (round to nearest even).
void convert_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, cudaStream_t stream);
void convert_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, cudaStream_t stream);

// ops::add: out = a + b (out may alias either).
void add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream);

// ops::embedding_forward / _backward. ids [T], table / dtable [V, h], out / dout [T, h].
// An id outside [0, V) writes a zero row and stores the smallest offending token index in
// *bad_token (initialise it to INT32_MAX; may be null).
void embedding_forward(const std::int32_t* ids, const float* table, float* out, std::int64_t tokens,
                       std::int64_t vocab, std::int64_t hidden, std::int32_t* bad_token,
                       cudaStream_t stream);
// padding_idx >= 0: that row gets nothing (ops::embedding_backward).
void embedding_backward(const std::int32_t* ids, const float* dout, float* dtable,
                        std::int64_t tokens, std::int64_t vocab, std::int64_t hidden,
                        std::int64_t padding_idx, cudaStream_t stream);
// ops::embedding_shard_forward / _backward: table / dtable hold rows [first, first + rows) of a
// vocabulary of `vocab` ids ([rows, h]); an id of another shard gives a zero row / no gradient,
// an id outside [0, vocab) is flagged as above.
void embedding_shard_forward(const std::int32_t* ids, const float* table, float* out,
                             std::int64_t tokens, std::int64_t first, std::int64_t rows,
                             std::int64_t vocab, std::int64_t hidden, std::int32_t* bad_token,
                             cudaStream_t stream);
void embedding_shard_backward(const std::int32_t* ids, const float* dout, float* dtable,
                              std::int64_t tokens, std::int64_t first, std::int64_t rows,
                              std::int64_t vocab, std::int64_t hidden, std::int64_t padding_idx,
                              cudaStream_t stream);

// ops::rmsnorm_forward / _backward over rows of n. inv_rms [rows]. one_plus_weight selects
// the (1 + w) variant. y may alias x; dx may alias dy or x.
void rmsnorm_forward(const float* x, const float* weight, float* y, float* inv_rms,
                     std::int64_t rows, std::int64_t n, float eps, bool one_plus_weight,
                     cudaStream_t stream);
void rmsnorm_backward(const float* dy, const float* x, const float* weight, const float* inv_rms,
                      float* dx, float* dweight, std::int64_t rows, std::int64_t n,
                      bool one_plus_weight, bool accumulate_dx, cudaStream_t stream);

// ops::rope_forward (inverse = false) / rope_backward (inverse = true). x, y [T, H, d].
// table: the rotary_dim / 2 inverse frequencies and the factor on cos and sin
// (ops::rope_frequencies in fp32), passed to the kernel by value.
inline constexpr int kRopeMaxPairs = 512;
struct RopeTable {
  float inv_freq[kRopeMaxPairs];
  float attention_factor;
};
void rope_apply(const float* x, const std::int32_t* positions, float* y, std::int64_t tokens,
                std::int64_t heads, std::int64_t head_dim, int rotary_dim, const RopeTable& table,
                bool inverse, cudaStream_t stream);

// ops::swiglu_forward / _backward: gate, up, out [rows, I] with row strides (ld) so the fused
// [rows, 2I] layout is the same call with ld = 2I.
void swiglu_forward(const float* gate, const float* up, std::int64_t ld_in, float* out,
                    std::int64_t rows, std::int64_t inner, cudaStream_t stream);
void swiglu_backward(const float* dout, const float* gate, const float* up, std::int64_t ld_in,
                     float* dgate, float* dup, std::int64_t ld_grad, std::int64_t rows,
                     std::int64_t inner, cudaStream_t stream);
// The same reading gate / up as bf16 storage (bf16 activations), widened exactly.
void swiglu_forward(const bf16* gate, const bf16* up, std::int64_t ld_in, float* out,
                    std::int64_t rows, std::int64_t inner, cudaStream_t stream);
void swiglu_backward(const float* dout, const bf16* gate, const bf16* up, std::int64_t ld_in,
                     float* dgate, float* dup, std::int64_t ld_grad, std::int64_t rows,
                     std::int64_t inner, cudaStream_t stream);

// ops::router_forward / _backward. logits, probs, dlogits [T, E]; ids, weights, dweights [T, k].
void router_forward(const float* logits, std::int64_t tokens, int experts, int top_k,
                    bool normalize_top_k, std::int32_t* expert_ids, float* weights, float* probs,
                    cudaStream_t stream);
// ops::balanced_router_forward: positions i32 [T]; ids S_j = (position * k + j + layer) mod E.
void balanced_router_forward(const float* logits, const std::int32_t* positions,
                             std::int64_t tokens, int experts, int layer, int top_k,
                             bool normalize_top_k, std::int32_t* expert_ids, float* weights,
                             float* probs, cudaStream_t stream);
void router_backward(const float* dweights, const std::int32_t* expert_ids, const float* weights,
                     const float* probs, std::int64_t tokens, int experts, int top_k,
                     bool normalize_top_k, float* dlogits, cudaStream_t stream);

// ops::build_permute_plan: expert_ids [T·k] -> expert_order, assignment_row [T·k],
// expert_offsets [E + 1] (device, i64). experts <= 1024. An id outside [0, E) stores the
// smallest offending assignment in *bad_assignment (initialise to INT32_MAX; may be null).
void build_permute_plan(const std::int32_t* expert_ids, std::int64_t assignments, int experts,
                        std::int32_t* expert_order, std::int32_t* assignment_row,
                        std::int64_t* expert_offsets, std::int32_t* bad_assignment,
                        cudaStream_t stream);
// ops::permute_forward / _backward / unpermute_forward / _backward (k = top_k).
void permute_forward(const float* x, const std::int32_t* expert_order, float* x_perm,
                     std::int64_t tokens, int top_k, std::int64_t hidden, cudaStream_t stream);
void permute_backward(const float* dx_perm, const std::int32_t* assignment_row, float* dx,
                      std::int64_t tokens, int top_k, std::int64_t hidden, bool accumulate,
                      cudaStream_t stream);
void unpermute_forward(const float* y_perm, const std::int32_t* assignment_row,
                       const float* weights, float* y, std::int64_t tokens, int top_k,
                       std::int64_t hidden, cudaStream_t stream);
void unpermute_backward(const float* dy, const float* y_perm, const std::int32_t* assignment_row,
                        const float* weights, float* dy_perm, float* dweights, std::int64_t tokens,
                        int top_k, std::int64_t hidden, cudaStream_t stream);
// The same reading y_perm as bf16 storage (bf16 activations), widened exactly.
void unpermute_forward(const bf16* y_perm, const std::int32_t* assignment_row, const float* weights,
                       float* y, std::int64_t tokens, int top_k, std::int64_t hidden,
                       cudaStream_t stream);
void unpermute_backward(const float* dy, const bf16* y_perm, const std::int32_t* assignment_row,
                        const float* weights, float* dy_perm, float* dweights, std::int64_t tokens,
                        int top_k, std::int64_t hidden, cudaStream_t stream);

// ops::adamw_step (PyTorch AdamW); bias corrections are computed on the host in double like
// the CPU op. grad_scale folds normalisation / clipping in. Each operation is rounded on its
// own, in the CPU op's order, so the results equal the CPU's bit for bit.
struct AdamWKernelParams {
  double lr = 1e-5, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  std::int64_t step = 1;
  double grad_scale = 1.0;
  bool apply_weight_decay = true;
};
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& params, cudaStream_t stream);
// The precision-aware optimizer: either moment stored in bf16, widened to fp32 for the update
// and rounded to nearest even when stored; the parameter update reads the moments as stored.
void adamw_step(float* param, const float* grad, bf16* exp_avg, bf16* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& params, cudaStream_t stream);
void adamw_step(float* param, const float* grad, bf16* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& params, cudaStream_t stream);
void adamw_step(float* param, const float* grad, float* exp_avg, bf16* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& params, cudaStream_t stream);

// ops::sum_of_squares: *result += Σ x² (accumulated in double; zero *result first).
void sum_of_squares(const float* x, std::int64_t n, double* result, cudaStream_t stream);

}  // namespace dyncp::kernels
