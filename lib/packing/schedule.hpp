#pragma once
// The Schedule contract (docs/architecture.md §5): which pool ranks run which samples of one
// global batch, microbatch by microbatch, and on which context-parallel group.
//
// Pool ranks are numbered CP index fastest (r = dp_idx * cp + cp_idx). Ids are positions
// 0..GBS-1 in the step's global batch list. In microbatch m the pool is cut into groups: runs
// of consecutive ranks that all hold the same ordered id list. The contract:
//   1. every microbatch covers ranks 0..P-1 with groups, no gaps, no overlaps;
//   2. every group holds at least one id (no idle rank), so all ranks run M microbatches;
//   3. group size is a power of two and the start is a multiple of it (aligned block), or the
//      group is the whole pool (the only way a pool that is not a power of two is covered);
//      a static layout instead requires every group to have the static CP size;
//   4. capacity: sum of padded lengths / size <= max_seqlen_per_dp_cp_rank, per group, each
//      length padded for that group (AlignmentRule);
//   5. every id 0..GBS-1 appears in exactly one group of one microbatch;
//   6. a group is at least as large as its longest sequence needs
//      (needed(n) = the least power of two c >= min_group_size with L(n, c) <= c x cap),
//      dynamic only.
// Storage is flat (one id array, one group array) so a 30k-sample, 1k-rank schedule costs a
// few allocations; `rank_lists()` expands it into Megatron's [m][r] -> ids form.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packing/alignment.hpp"

namespace dyncp::packing {

struct ScheduleGroup {
  std::int64_t start_rank = 0;
  std::int64_t size = 0;
  std::int64_t ids_offset = 0;  // into Schedule::ids
  std::int64_t num_ids = 0;
};

struct Schedule {
  std::int64_t pool_size = 0;
  std::vector<ScheduleGroup> groups;                // microbatch by microbatch, left to right
  std::vector<std::int64_t> microbatch_offsets{0};  // groups of m: [offsets[m], offsets[m+1])
  std::vector<std::int64_t> ids;

  std::int64_t num_microbatches() const {
    return static_cast<std::int64_t>(microbatch_offsets.size()) - 1;
  }
  std::span<const ScheduleGroup> groups_of(std::int64_t microbatch) const;
  std::span<const std::int64_t> ids_of(const ScheduleGroup& group) const;
  // The group of `rank` in `microbatch` (binary search over the microbatch's groups).
  const ScheduleGroup& group_of(std::int64_t microbatch, std::int64_t rank) const;
  // result[m][r] = ordered ids of rank r in microbatch m.
  std::vector<std::vector<std::vector<std::int64_t>>> rank_lists() const;

  // Building: open a microbatch, then append its groups left to right.
  void begin_microbatch();
  void add_group(std::int64_t start_rank, std::int64_t size, std::span<const std::int64_t> ids);
  void end_microbatch();
};

// Parse Megatron's [m][r] -> ids form into groups (runs of identical lists). Throws a data
// error if a microbatch does not list exactly `pool_size` ranks.
Schedule schedule_from_rank_lists(const std::vector<std::vector<std::vector<std::int64_t>>>& lists,
                                  std::int64_t pool_size);

// What the schedulers take. `lengths[i]` is the length of the sample at position i; on a group
// of c ranks it occupies `alignment.padded(lengths[i], c)` tokens (the default rule takes the
// lengths as given, already padded).
struct SchedulerInput {
  std::span<const std::int64_t> lengths;
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t max_seqlen_per_dp_cp_rank = 0;  // "cap": tokens one rank may hold per microbatch
  std::int64_t min_group_size = 1;             // min_dynamic_context_parallel_size
  std::int64_t max_sequences_per_bin = 0;      // dp_balanced only; 0 = unlimited
  AlignmentRule alignment;                     // how lengths are padded on each group

  std::int64_t pool_size() const { return data_parallel_size * context_parallel_size; }
  std::int64_t padded(std::size_t id, std::int64_t group_size) const {
    return alignment.padded(lengths[id], group_size);
  }
};

// Rejects what every scheduler rejects: non-positive sizes or cap (config errors naming the
// key), an empty batch, or a zero / negative length (data error naming the sample position).
void validate_scheduler_input(const SchedulerInput& input);

// Smallest group that may hold a sequence of `length` tokens: the next power of two
// >= ceil(length / cap), at least `min_group_size` (Megatron's dcp_gpus_needed).
std::int64_t group_size_needed(std::int64_t length, std::int64_t cap, std::int64_t min_group_size);
// The same when the length is padded per group: the least such size c whose padded length
// L(length, c) also fits c x cap (per-group padding can push a length over a group's edge).
std::int64_t group_size_needed(std::int64_t length, std::int64_t cap, std::int64_t min_group_size,
                               const AlignmentRule& alignment);

struct ScheduleCheckOptions {
  std::int64_t static_group_size = 0;  // > 0: every group must have exactly this size
  std::int64_t min_group_size = 1;     // clause 6 (dynamic layouts only)
  AlignmentRule alignment;             // lengths are padded for each group with this rule
};

// Verifies every clause above. Returns an empty string when the schedule is valid, otherwise
// the first violated clause with microbatch, rank, group and id.
std::string check_schedule(const Schedule& schedule, std::span<const std::int64_t> lengths,
                           std::int64_t max_seqlen_per_dp_cp_rank,
                           const ScheduleCheckOptions& options = {});

bool is_power_of_two(std::int64_t value);

}  // namespace dyncp::packing
