// RoPE inverse-frequency tables as transformers' modeling_rope_utils builds them (formulas in
// rope.hpp). HF computes them in fp32 from the same formulas; the double values here round to
// within an ulp of those.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "ops/op_checks.hpp"
#include "ops/rope.hpp"

namespace dyncp::ops {
namespace {

// YaRN's attention-factor helper (get_mscale): 1 for no extension.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension index at which a frequency makes `rotations` turns over the original context.
double yarn_correction_dim(double rotations, double dim, double base, double context) {
  return dim * std::log(context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

void apply_yarn(const RopeParams& params, int n, RopeFrequencies& out) {
  const RopeScaling& s = params.scaling;
  if (n % 2 != 0)
    detail::fail("rope_frequencies",
                 "YaRN needs an even frequency_dim (transformers' ramp has n/2 "
                 "entries), got " +
                     std::to_string(n));
  const double dim = n, base = params.theta, context = s.original_max_position_embeddings;
  double low = yarn_correction_dim(s.beta_fast, dim, base, context);
  double high = yarn_correction_dim(s.beta_slow, dim, base, context);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  for (int i = 0; i < out.count; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
    const double unscaled = out.inv_freq[i];
    out.inv_freq[i] = unscaled / s.factor * (1.0 - extrapolation) + unscaled * extrapolation;
  }
  if (s.attention_factor > 0.0) {
    out.attention_factor = s.attention_factor;
  } else if (s.mscale != 0.0 && s.mscale_all_dim != 0.0) {
    out.attention_factor =
        yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  } else {
    out.attention_factor = yarn_mscale(s.factor, 1.0);
  }
}

void apply_llama3(const RopeScaling& s, RopeFrequencies& out) {
  const double low_freq_wavelength = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelength = s.original_max_position_embeddings / s.high_freq_factor;
  for (int i = 0; i < out.count; ++i) {
    const double f = out.inv_freq[i];
    const double wavelength = 2.0 * std::numbers::pi / f;
    if (wavelength > low_freq_wavelength) {
      out.inv_freq[i] = f / s.factor;
    } else if (!(wavelength < high_freq_wavelength)) {
      const double smooth = (s.original_max_position_embeddings / wavelength - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      out.inv_freq[i] = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
}

// transformers' _compute_dynamic_ntk_parameters with seq_len = the sequence's length, the
// value dynamic_rope_update passes for a sequence run alone (its last position + 1); up to
// max_position_embeddings the base is unchanged.
double dynamic_ntk_base(const RopeParams& params, int n) {
  const RopeScaling& s = params.scaling;
  constexpr std::string_view op = "rope_frequencies";
  if (!(s.max_position_embeddings > 0.0)) detail::fail(op, "dynamic needs max_position_embeddings");
  if (n <= 2) detail::fail(op, "dynamic needs a frequency_dim above 2, got " + std::to_string(n));
  const auto length = static_cast<double>(s.sequence_length);
  if (!(length > s.max_position_embeddings)) return params.theta;
  return params.theta * std::pow(s.factor * length / s.max_position_embeddings - (s.factor - 1.0),
                                 static_cast<double>(n) / static_cast<double>(n - 2));
}

}  // namespace

RopeFrequencies rope_frequencies(const RopeParams& params) {
  constexpr std::string_view op = "rope_frequencies";
  const int n = params.frequency_dim > 0 ? params.frequency_dim : params.rotary_dim;
  if (params.rotary_dim <= 0 || params.rotary_dim % 2 != 0 || params.rotary_dim > kMaxRotaryDim ||
      (n != params.rotary_dim && n != params.rotary_dim - 1)) {
    detail::fail(op, "rotary_dim " + std::to_string(params.rotary_dim) +
                         " must be even and <= " + std::to_string(kMaxRotaryDim) +
                         ", frequency_dim " + std::to_string(n) + " rotary_dim or rotary_dim - 1");
  }
  RopeFrequencies out;
  out.count = params.rotary_dim / 2;
  const RopeScaling& s = params.scaling;
  if (s.type != RopeScalingType::none && !(s.factor > 0.0))
    detail::fail(op, "scaling factor must be positive, got " + std::to_string(s.factor));
  if ((s.type == RopeScalingType::yarn || s.type == RopeScalingType::llama3) &&
      !(s.original_max_position_embeddings > 0.0))
    detail::fail(op, "original_max_position_embeddings must be positive");
  const double base =
      s.type == RopeScalingType::dynamic ? dynamic_ntk_base(params, n) : params.theta;
  for (int i = 0; i < out.count; ++i)
    out.inv_freq[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / n);
  switch (s.type) {
    case RopeScalingType::none:
    case RopeScalingType::dynamic:  // the base above
      break;
    case RopeScalingType::linear:
      for (int i = 0; i < out.count; ++i) out.inv_freq[i] /= s.factor;
      break;
    case RopeScalingType::yarn:
      apply_yarn(params, n, out);
      break;
    case RopeScalingType::llama3:
      apply_llama3(s, out);
      break;
  }
  return out;
}

}  // namespace dyncp::ops
