#pragma once
// SwiGLU activation: m = silu(a) ⊙ b, silu(a) = a σ(a), σ the logistic function.
// Backward: da = dm ⊙ b ⊙ silu'(a), db = dm ⊙ silu(a), silu'(a) = σ(a)(1 + a(1 − σ(a))).
// No parameters; input gradients overwrite.

#include "ops/context.hpp"

namespace dyncp::ops {

// gate (a), up (b), out (m): all [rows, I].
void swiglu_forward(const OpContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);
void swiglu_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup);

// Fused layout (HF 5.x experts.gate_up_proj = cat(gate, up) along the output dim):
// gate_up: [rows, 2I] with columns [0, I) = gate and [I, 2I) = up; out: [rows, I];
// dgate_up: [rows, 2I] (overwrite).
void swiglu_fused_forward(const OpContext& ctx, const Tensor& gate_up, const Tensor& out);
void swiglu_fused_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate_up,
                           const Tensor& dgate_up);

}  // namespace dyncp::ops
