#pragma once
// The device scratch of the CUDA gated delta rule (kernels/gated_delta_rule_chunked*.cu, the
// default, and the token-by-token reference kernels/gated_delta_rule.cu), in a CUDA-free header
// so the dry-run memory estimate counts what the kernels allocate.

#include <algorithm>
#include <cstdint>

namespace dyncp::ops {

// --- token-by-token reference (kernels/gated_delta_rule.cu) ---

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

// --- chunked kernels (kernels/gated_delta_rule_chunked*.cu) ---

// Blocks of the chunked backward's per-chunk kernel, which loop over (chunk, value head) pairs;
// each holds a slot of C x (4 dv + 5 dk) floats.
inline constexpr std::int64_t kGatedDeltaRuleChunkedBackwardBlocks = 256;

constexpr std::int64_t gated_delta_rule_chunked_backward_blocks(const GatedDeltaRuleScratchShape& s,
                                                                std::int64_t chunks) {
  return std::min(chunks * s.value_heads, kGatedDeltaRuleChunkedBackwardBlocks);
}

// What the prepare kernel leaves per token and value head: γ, W (dk) and one row of the chunk's
// C x C matrix M; the forward also U (dv; the backward's chunk kernel recomputes it).
constexpr std::int64_t gated_delta_rule_chunked_prepared_floats(const GatedDeltaRuleScratchShape& s,
                                                                std::int64_t tokens,
                                                                bool backward) {
  return tokens * s.value_heads * (1 + s.key_dim + (backward ? 0 : s.value_dim) + s.chunk);
}

constexpr std::int64_t gated_delta_rule_chunked_forward_scratch_floats(
    const GatedDeltaRuleScratchShape& s, std::int64_t tokens) {
  return gated_delta_rule_chunked_prepared_floats(s, tokens, false);
}

// The backward: the prepared rows, every chunk's outgoing-state gradient ([chunks, Hv, dk, dv],
// the size of the saved chunk states), the per-chunk kernel's slots and per-head dq, dk rows.
constexpr std::int64_t gated_delta_rule_chunked_backward_scratch_floats(
    const GatedDeltaRuleScratchShape& s, std::int64_t tokens, std::int64_t chunks) {
  return gated_delta_rule_chunked_prepared_floats(s, tokens, true) +
         chunks * s.value_heads * s.key_dim * s.value_dim +
         gated_delta_rule_chunked_backward_blocks(s, chunks) * s.chunk *
             (4 * s.value_dim + 5 * s.key_dim) +
         2 * tokens * s.value_heads * s.key_dim;
}

}  // namespace dyncp::ops
