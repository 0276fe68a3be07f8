#pragma once
// Rotary position embedding, HF "rotate_half" (non-interleaved) convention, partial rotary,
// and the RoPE scaling types of transformers' modeling_rope_utils (linear, YaRN, Llama 3,
// dynamic NTK).
//
// x: [T, H, d]; positions: i32 [T] (position of each token inside its sequence; global
// positions under context parallelism). rotary_dim = d_rot (even, <= d) is the rotated width;
// frequency_dim = n is the width the frequencies are spread over (HF's
// int(head_dim · partial_rotary_factor)): n = d_rot, or d_rot − 1 when HF's n is odd (it then
// rotates ceil-to-even dims with frequencies over the true n).
//   inv_freq_i = theta^(−2i / n),  i = 0 .. d_rot/2 − 1, then rescaled by the scaling type
//   (rope_frequencies below); a = p · inv_freq_i (computed in the compute dtype, like HF in
//   fp32), c = m cos a, s = m sin a with m the attention factor (YaRN; 1 otherwise);
//   for j < d_rot/2, half = d_rot/2:
//   y_j        = x_j c − x_{j+half} s
//   y_{j+half} = x_{j+half} c + x_j s
//   dims >= d_rot pass through unchanged.
// Backward is the transpose: the inverse rotation (s → −s) times the same m. No parameters.
// y may alias x (in place); dx may alias dy.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

inline constexpr int kMaxRotaryDim = 1024;

enum class RopeScalingType { none, linear, yarn, llama3, dynamic };

// transformers' rope_parameters fields, for the types that change the frequencies.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;                            // linear, yarn, llama3
  double original_max_position_embeddings = 0.0;  // yarn, llama3
  double beta_fast = 32.0;                        // yarn
  double beta_slow = 1.0;                         // yarn
  bool truncate = true;                           // yarn
  double attention_factor = 0.0;  // yarn: 0 derives it from factor, mscale, mscale_all_dim
  double mscale = 0.0;            // yarn
  double mscale_all_dim = 0.0;    // yarn
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  // dynamic NTK, as transformers runs one sequence of sequence_length tokens alone: up to
  // max_position_embeddings default RoPE; beyond, the base becomes
  //   theta · (factor · L / max_position_embeddings − (factor − 1))^(n / (n − 2)),  L = length.
  // The frequencies belong to the whole sequence, so every row of it (on every CP rank) is
  // rotated with the same table: the caller passes the sequence's full real length.
  double max_position_embeddings = 0.0;  // dynamic
  std::int64_t sequence_length = 0;      // dynamic
};

struct RopeParams {
  double theta = 10000.0;
  int rotary_dim = 0;     // d_rot
  int frequency_dim = 0;  // n; 0 means d_rot
  RopeScaling scaling = {};
};

// The inverse frequencies (rotary_dim / 2 of them) and the factor m on cos and sin, computed
// in double with transformers' formulas.
struct RopeFrequencies {
  int count = 0;
  double attention_factor = 1.0;
  double inv_freq[kMaxRotaryDim / 2] = {};
};
RopeFrequencies rope_frequencies(const RopeParams& params);

void rope_forward(const OpContext& ctx, const Tensor& x, const Tensor& positions,
                  const RopeParams& params, const Tensor& y);
// dx: overwrite.
void rope_backward(const OpContext& ctx, const Tensor& dy, const Tensor& positions,
                   const RopeParams& params, const Tensor& dx);

}  // namespace dyncp::ops
