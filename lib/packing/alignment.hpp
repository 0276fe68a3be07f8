#pragma once
// Per-sequence alignment padding (docs/architecture.md §5, Megatron reference §3.5/§4.6).
// A sequence of n real tokens running on a group of c ranks is padded to
// L(n, c) = ceil(n / A(c)) * A(c) so that its zigzag split over the group is exact (each of
// the 2c chunks a whole number of tokens). The padded length is a property of the pair
// (sample, group), decided after scheduling; the real length n is what the data holds.
//   per_group (default):  A(c) = 2c for c > 1, 1 for c = 1
//   pool (Megatron-Core): A(c) = 2 * dp * cp under dynamic CP for every c (every power-of-two
//                         group size divides dp * cp, so one padding fits every group)
//   static CP:            A = 2 * cp (1 without CP) in both modes: its groups all have cp ranks
//   sequence parallelism (tp > 1): A is multiplied by tp.
// fold_alignment_padding reports the padded length as the real length, so a bin's cu_seqlens
// equal its cu_seqlens_padded (the pad tokens stay loss-masked after the sequence's last real
// token, which causal attention cannot see from real positions).

#include <cstdint>

#include "config/config_container.hpp"
#include "config/enums.hpp"

namespace dyncp::packing {

struct AlignmentLayout {
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  bool dynamic_context_parallel = false;
  std::int64_t tensor_parallel_size = 1;
  bool sequence_parallel = false;
};

// Megatron's pool-wide multiple (the `pool` rule); config errors (naming the key) for sizes
// below 1.
std::int64_t alignment_multiple(const AlignmentLayout& layout);

// ceil(length / multiple) * multiple; data error for length < 1, config error for multiple < 1.
std::int64_t padded_length(std::int64_t length, std::int64_t multiple);

// The padding of a sequence as a function of the group it runs on. The default rule (pool,
// multiple 1) pads nothing: lengths are taken as given (Megatron's inputs replay exactly).
struct AlignmentRule {
  config::PackingAlignment mode = config::PackingAlignment::pool;
  std::int64_t pool_multiple = 1;             // pool: the one multiple of every sequence
  std::int64_t sequence_parallel_factor = 1;  // per_group: tp under sequence parallelism

  bool per_group() const { return mode == config::PackingAlignment::per_group; }
  // A(c): the multiple a sequence on a group of `group_size` ranks is padded to.
  std::int64_t multiple(std::int64_t group_size) const {
    if (!per_group()) return pool_multiple;
    return (group_size > 1 ? 2 * group_size : 1) * sequence_parallel_factor;
  }
  // L(n, c); n >= 1 (the schedulers validate lengths first).
  std::int64_t padded(std::int64_t length, std::int64_t group_size) const {
    const std::int64_t m = multiple(group_size);
    // Schedulers call this per candidate group: per-group multiples are powers of two
    // unless tp is not, so round with a mask when possible.
    if ((m & (m - 1)) == 0) return (length + m - 1) & ~(m - 1);
    return (length + m - 1) / m * m;
  }
};

// The rule of a layout: pool mode uses alignment_multiple(layout) (or `pool_multiple_override`
// when > 0: dataset.global_batch_packing_pad_to_multiple_of); per_group pads for each group,
// which for a static layout is 2 x cp, the same as pool mode.
AlignmentRule alignment_rule(const AlignmentLayout& layout, config::PackingAlignment mode,
                             std::int64_t pool_multiple_override = 0);

// The rule of a resolved config (its layout, model.sequence_parallel, packing.alignment and
// dataset.global_batch_packing_pad_to_multiple_of): what the trainer and --dry-run use.
AlignmentRule alignment_rule(const config::ConfigContainer& config);

struct SequenceLength {
  std::int64_t original = 0;  // real tokens (cu_seqlens)
  std::int64_t padded = 0;    // after alignment padding (cu_seqlens_padded, scheduling)
};

SequenceLength align_sequence(std::int64_t length, std::int64_t multiple,
                              bool fold_alignment_padding);

}  // namespace dyncp::packing
