#pragma once
// Gradient norms. The global norm is sqrt(Σ over every gradient tensor of Σ g²); across ranks
// the caller all-reduces the sum of squares (counting each replicated tensor once) before the
// square root. Sums are accumulated in double, in a fixed order.

#include <span>

#include "ops/context.hpp"

namespace dyncp::ops {

// Σ x² over all elements (f32 / f64).
double sum_of_squares(const OpContext& ctx, const Tensor& x);
// sqrt(Σ_tensors sum_of_squares) on this rank only.
double local_grad_norm(const OpContext& ctx, std::span<const Tensor> grads);
// Factor to multiply gradients by for clipping to max_norm (1 when norm <= max_norm or
// max_norm <= 0): max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_.
double clip_coefficient(double total_norm, double max_norm);

}  // namespace dyncp::ops
