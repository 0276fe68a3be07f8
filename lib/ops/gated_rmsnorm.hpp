#pragma once
// Gated RMSNorm: the Gated DeltaNet output norm of Qwen3-Next / Qwen3.5 (`linear_attn.norm`).
// Its weight is PLAIN (identity value: ones), unlike the zero-centred (1 + w) residual and q/k
// norms of the same models (rmsnorm.hpp, RmsNormVariant::one_plus_weight). HF stores it plain;
// mixing the two up is the easiest bug to make in the hybrid model.
//
// Over the last dim (n = x.shape().last()); every leading index is a row. In the model the rows
// are (token, value head) and n = dv, with one weight [dv] shared by all heads:
//   r = 1 / sqrt(mean_j x_j² + eps),  x̂ = x · r,  silu(z) = z σ(z)
//   y = w ⊙ x̂ ⊙ silu(z)
// Backward, with G = dy ⊙ w ⊙ silu(z):
//   dx = r · (G − x̂ · (x̂·G) / n)
//   dz = dy ⊙ w ⊙ x̂ ⊙ silu'(z),  silu'(z) = σ(z)(1 + z(1 − σ(z)))
//   dw += Σ_rows dy ⊙ x̂ ⊙ silu(z)
//
// Shapes: x, z, y, dy, dx, dz: [rows..., n] (all the same shape); weight, dweight: [n];
// saved.inv_rms: [rows] (= numel / n). One float dtype (f32 or f64) for all.
// y may alias x or z; dx and dz may alias dy (each is written after its row is read).
// Gradients: dx, dz overwrite; dweight (parameter) accumulates. Undefined dx / dz / dweight
// are skipped. Needs no scratch.

#include "ops/context.hpp"
#include "ops/rmsnorm.hpp"

namespace dyncp::ops {

void gated_rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& z,
                           const Tensor& weight, double eps, const Tensor& y, RmsNormSaved& saved);

void gated_rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                            const Tensor& z, const Tensor& weight, const RmsNormSaved& saved,
                            const Tensor& dx, const Tensor& dz, const Tensor& dweight);

}  // namespace dyncp::ops
