#pragma once
// Rotary position embedding, HF "rotate_half" (non-interleaved) convention, partial rotary.
//
// x: [T, H, d]; positions: i32 [T] (position of each token inside its sequence; global
// positions under context parallelism); rotary_dim = d_rot (even, <= d; = d·partial_rotary_factor).
//   inv_freq_i = theta^(−2i / d_rot),  i = 0 .. d_rot/2 − 1;  a = p · inv_freq_i  (computed in
//   the compute dtype, like HF in fp32), c = cos a, s = sin a; for j < d_rot/2, half = d_rot/2:
//   y_j        = x_j c − x_{j+half} s
//   y_{j+half} = x_{j+half} c + x_j s
//   dims >= d_rot pass through unchanged.
// Backward is the inverse rotation (s → −s). No parameters.
// y may alias x (in place); dx may alias dy.

#include "ops/context.hpp"

namespace dyncp::ops {

struct RopeParams {
  double theta = 10000.0;
  int rotary_dim = 0;  // d_rot
};

void rope_forward(const OpContext& ctx, const Tensor& x, const Tensor& positions,
                  const RopeParams& params, const Tensor& y);
// dx: overwrite.
void rope_backward(const OpContext& ctx, const Tensor& dy, const Tensor& positions,
                   const RopeParams& params, const Tensor& dx);

}  // namespace dyncp::ops
