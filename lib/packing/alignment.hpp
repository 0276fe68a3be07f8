#pragma once
// Per-sequence alignment padding (docs/architecture.md §5, Megatron reference §3.5/§4.6).
// A sequence of n real tokens is padded to L = ceil(n / A) * A so that the zigzag split of
// every group it can run on is exact (each of the 2c chunks a whole number of tokens):
//   dynamic CP:  A = 2 * dp * cp   (every power-of-two group size c divides dp * cp)
//   static CP:   A = 2 * cp, or 1 without CP
//   sequence parallelism (tp > 1): A is multiplied by tp.
// fold_alignment_padding reports the padded length as the real length, so a bin's cu_seqlens
// equal its cu_seqlens_padded (the pad tokens stay loss-masked after the sequence's last real
// token, which causal attention cannot see from real positions).

#include <cstdint>

namespace dyncp::packing {

struct AlignmentLayout {
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  bool dynamic_context_parallel = false;
  std::int64_t tensor_parallel_size = 1;
  bool sequence_parallel = false;
};

// The multiple A; config errors (naming the key) for sizes below 1.
std::int64_t alignment_multiple(const AlignmentLayout& layout);

// ceil(length / multiple) * multiple; data error for length < 1, config error for multiple < 1.
std::int64_t padded_length(std::int64_t length, std::int64_t multiple);

struct SequenceLength {
  std::int64_t original = 0;  // real tokens (cu_seqlens)
  std::int64_t padded = 0;    // after alignment padding (cu_seqlens_padded, scheduling)
};

SequenceLength align_sequence(std::int64_t length, std::int64_t multiple,
                              bool fold_alignment_padding);

}  // namespace dyncp::packing
