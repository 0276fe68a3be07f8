#pragma once
// L2 normalisation over the last dim: the per-head q/k normalisation of Gated DeltaNet
// (HF / FLA `l2norm`, eps inside the square root, added to the SUM of squares, not the mean):
//   ρ = 1 / sqrt(Σ_j x_j² + eps),  y = x · ρ          (Qwen3-Next / 3.5: eps = 1e-6, n = dk)
// Backward (exact with eps):  dx = ρ · (dy − y · (y·dy))
// The 1/sqrt(dk) query scale of the model is NOT applied here: gated_delta_rule takes it as
// GatedDeltaRuleParams::scale.
//
// Shapes: x, y, dy, dx: [rows..., n]; saved.inv_norm: [rows] (= numel / n), holding ρ.
// One float dtype. y may alias x (in place: backward reads y, never x); dx may alias dy.
// dx overwrites. Needs no scratch.

#include "ops/context.hpp"

namespace dyncp::ops {

struct L2NormSaved {
  Tensor inv_norm;  // [rows]: ρ per row, written by forward, read by backward
};

void l2norm_forward(const OpContext& ctx, const Tensor& x, double eps, const Tensor& y,
                    L2NormSaved& saved);

// y: the forward OUTPUT (so forward may run in place).
void l2norm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y,
                     const L2NormSaved& saved, const Tensor& dx);

}  // namespace dyncp::ops
