#pragma once
// Short causal depthwise convolution followed by SiLU, over packed sequences: the Gated DeltaNet
// mixing of q, k, v (reference qwen-moe.md §3.4 step 2, §3.7). No bias (HF: conv1d bias=False).
//
// Channels are independent (depthwise). For token t of sequence s (rows [bos_s, eos_s)):
//   pre_t[c] = Σ_{j=0}^{K−1} w[c, j] · x_{t−(K−1)+j}[c],  x_u = 0 for u < bos_s
//   y_t[c]   = silu(pre_t[c]) = pre σ(pre)
// so w[c, K−1] multiplies the current token and every sequence starts from a clean (zero)
// window: nothing leaks across a cu_seqlens boundary.
// Backward (recomputes pre; nothing is saved), with dpre = dy ⊙ silu'(pre):
//   dx_u[c]  = Σ_j dpre_{u+(K−1)−j}[c] · w[c, j]   (only terms inside u's sequence)
//   dw[c, j] += Σ_t dpre_t[c] · x_{t−(K−1)+j}[c]   (same restriction)
//
// Shapes: x, y, dy, dx: [T, C] (C = conv_dim = 2·key_dim + value_dim in the model, channel
// order [q | k | v]); weight, dweight: [C, K] (HF conv1d.weight [C, 1, K] reshaped; any
// K >= 1, the models use 4); cu_seqlens: i32 [S + 1], starts at 0, non-decreasing, ends at T
// (empty sequences allowed). One float dtype. y must not alias x; dx must not alias dy.
// Gradients: dx overwrites, dweight (parameter) accumulates; undefined ones are skipped.
// Needs no scratch.

#include "ops/context.hpp"

namespace dyncp::ops {

void causal_conv1d_silu_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                                const Tensor& cu_seqlens, const Tensor& y);

void causal_conv1d_silu_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const Tensor& cu_seqlens, const Tensor& dx,
                                 const Tensor& dweight);

}  // namespace dyncp::ops
