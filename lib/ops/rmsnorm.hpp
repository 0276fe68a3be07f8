#pragma once
// RMSNorm over the last dim (n = x.shape().last()), every leading index a separate row; so the
// same op is the hidden-size norm on [T, h] and the per-head q/k norm on [T, H, d].
//
//   r = 1 / sqrt(mean_j x_j² + eps),  x̂ = x · r
//   plain            (Qwen3-MoE):          y = w ⊙ x̂          (identity weight: ones)
//   one_plus_weight  (Qwen3-Next / 3.5):   y = (1 + w) ⊙ x̂    (identity weight: zeros)
//
// Backward, with w_eff = w or 1 + w and g = w_eff ⊙ dy:
//   dx = r · (g − x̂ · (x̂·g) / n),   dw += Σ_rows dy ⊙ x̂  (same for both variants)
//
// x, y: [rows..., n]; weight: [n]; saved.inv_rms: [rows] (= numel / n), same float dtype.
// y may alias x (in place); dx may alias dy or x.

#include "ops/context.hpp"

namespace dyncp::ops {

enum class RmsNormVariant { plain, one_plus_weight };

struct RmsNormSaved {
  Tensor inv_rms;  // [rows]: r per row, written by forward, read by backward
};

void rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight, double eps,
                     RmsNormVariant variant, const Tensor& y, RmsNormSaved& saved);
// dx: overwrite or accumulate (dx_mode; accumulate where the residual stream joins).
// dweight: parameter gradient, accumulates.
void rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                      RmsNormVariant variant, const RmsNormSaved& saved, const Tensor& dx,
                      const Tensor& dweight, GradMode dx_mode = GradMode::overwrite);

}  // namespace dyncp::ops
