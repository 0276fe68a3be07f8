#pragma once
// The decay and write-strength gates of Gated DeltaNet (reference qwen-moe.md §3.4 step 3),
// per token and value head:
//   beta = σ(b)
//   g    = −exp(A_log) · softplus(a + dt_bias)     (log decay, <= 0; the decay is α = exp(g))
// softplus(x) = log(1 + e^x), and x for x > 20 (PyTorch's F.softplus threshold; the derivative
// is then exactly 1, as in PyTorch).
// Backward:
//   db = dbeta · β(1 − β)
//   da = dg · (−exp(A_log)) · softplus'(a + dt_bias),  softplus'(x) = σ(x) (1 above the threshold)
//   ddt_bias += Σ_t da,   dA_log += Σ_t dg · g
//
// Shapes: a, b, g, beta, dg, dbeta, da, db: [T, Hv]; A_log, dt_bias, dA_log, ddt_bias: [Hv].
// One float dtype (the model keeps these in the training dtype; checkpoints may hold A_log in
// fp32, which the loader converts). Gradients: da, db overwrite; dA_log, ddt_bias (parameters)
// accumulate. Undefined gradient outputs are skipped; undefined dg or dbeta count as zero.
// No scratch.

#include "ops/context.hpp"

namespace dyncp::ops {

void gated_delta_gates_forward(const OpContext& ctx, const Tensor& a, const Tensor& b,
                               const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
                               const Tensor& beta);

void gated_delta_gates_backward(const OpContext& ctx, const Tensor& dg, const Tensor& dbeta,
                                const Tensor& a, const Tensor& b, const Tensor& A_log,
                                const Tensor& dt_bias, const Tensor& da, const Tensor& db,
                                const Tensor& dA_log, const Tensor& ddt_bias);

}  // namespace dyncp::ops
