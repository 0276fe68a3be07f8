#pragma once
// AdamW (decoupled weight decay, PyTorch torch.optim.AdamW semantics), one tensor per call.
// With t = step (1-based), g = grad_scale · grad:
//   p ← p − lr · weight_decay · p        (skipped when apply_weight_decay = false: norms, biases)
//   m ← β1 m + (1 − β1) g
//   v ← β2 v + (1 − β2) g²
//   p ← p − lr · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + eps)
// param, grad, exp_avg (m), exp_avg_sq (v): same shape and float dtype (fp32 master weights).
// Precision-aware optimizer: with an f32 param either moment may instead be bf16 storage; it is
// read into fp32, updated as above and rounded to nearest even when stored, and the parameter
// update uses the moments as stored.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

struct AdamWParams {
  double lr = 1e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::int64_t step = 1;    // t, counted from 1
  double grad_scale = 1.0;  // folds gradient normalisation / clipping into the update
};

void adamw_step(const OpContext& ctx, const Tensor& param, const Tensor& grad,
                const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWParams& params,
                bool apply_weight_decay);

}  // namespace dyncp::ops
