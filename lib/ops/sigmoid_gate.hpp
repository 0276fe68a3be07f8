#pragma once
// Sigmoid gates of the hybrid (Qwen3-Next / 3.5) layers, σ the logistic function.
//
// Element-wise gate (gated attention, before o_proj):
//   out = x ⊙ σ(gate)
//   dx = dout ⊙ σ(gate),  dgate = dout ⊙ x ⊙ σ(gate)(1 − σ(gate))
// Shapes: x, gate, out, dout, dx, dgate all the same shape. out may alias x or gate; dx, dgate
// may alias dout.
//
// Row gate (shared expert behind `shared_expert_gate`, one logit per token):
//   out[r, :] (=|+=) σ(gate[r]) · x[r, :]
//   dx[r, :] = σ(gate[r]) · dout[r, :],  dgate[r] = σ'(gate[r]) · Σ_j dout[r, j] x[r, j]
// Shapes: x, out, dout, dx: [rows, n] (any rank; rows = numel / last dim); gate, dgate: any
// shape with `rows` elements ([T] or [T, 1]). out_mode = accumulate adds the gated rows into
// out (so the shared expert joins the routed output in one pass); out must not alias x then.
//
// One float dtype for all. Gradients overwrite (no parameters here: the gate logits come from
// a linear layer whose backward the caller runs). Undefined dx / dgate are skipped. No scratch.

#include "ops/context.hpp"

namespace dyncp::ops {

void sigmoid_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                          const Tensor& out);
void sigmoid_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                           const Tensor& gate, const Tensor& dx, const Tensor& dgate);

void sigmoid_row_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                              const Tensor& out, GradMode out_mode = GradMode::overwrite);
void sigmoid_row_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                               const Tensor& gate, const Tensor& dx, const Tensor& dgate);

}  // namespace dyncp::ops
