#pragma once
// The device scratch of the CUDA gated delta rule's backward (kernels/gated_delta_rule.cu), in
// a CUDA-free header so the dry-run memory estimate counts what the kernel allocates.

#include <algorithm>
#include <cstdint>

namespace dyncp::ops {

// Thread blocks of the backward: one per (sequence, value head), at most this many at once.
inline constexpr std::int64_t kGatedDeltaRuleMaxBackwardBlocks = 64;

struct GatedDeltaRuleScratchShape {
  std::int64_t sequences = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  std::int64_t chunk = 64;  // tokens per chunk (kernels::GatedDeltaRuleArgs::chunk)
};

constexpr std::int64_t gated_delta_rule_backward_blocks(const GatedDeltaRuleScratchShape& s) {
  return std::min(s.sequences * s.value_heads, kGatedDeltaRuleMaxBackwardBlocks);
}

// One block's slot: the chunk's C + 1 states and C state gradients ([dk][dv] each) and four
// [C][dv] rows of per-token partials.
constexpr std::int64_t gated_delta_rule_backward_slot_floats(const GatedDeltaRuleScratchShape& s) {
  return (2 * s.chunk + 1) * s.key_dim * s.value_dim + 4 * s.chunk * s.value_dim;
}

// Floats of the whole scratch: every block's slot plus per-head dq and dk rows of all tokens.
constexpr std::int64_t gated_delta_rule_backward_scratch_floats(const GatedDeltaRuleScratchShape& s,
                                                                std::int64_t tokens) {
  return gated_delta_rule_backward_blocks(s) * gated_delta_rule_backward_slot_floats(s) +
         2 * tokens * s.value_heads * s.key_dim;
}

}  // namespace dyncp::ops
