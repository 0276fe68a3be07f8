#pragma once
// `cost_aware`: our dynamic-CP scheduler. Same contract as default_dynamic_cp (aligned
// power-of-two groups, capacity, every rank busy, equal microbatch counts), but it minimises
// the modelled step time of packing/cost_model.hpp over the whole step instead of balancing an
// L^2/c proxy microbatch by microbatch.
//
// The buddy-tree layout (pools that are a power of two):
//   1. each sequence gets a group size: needed(L), or larger when its time alone on that
//      group would exceed a multiple of the mean per-rank work of the step (it would be the
//      critical path); several multiples are tried;
//   2. the pool is a binary tree of aligned blocks. Largest rank-seconds first, each sequence
//      goes to a block of its group size: the one whose busiest rank path (own work of the
//      block, of the blocks above it and of the busiest chain below it) is the least so far
//      (critical-path split), or, as a second candidate, down the tree to the half with fewer
//      rank-seconds (rank-seconds split);
//   3. each block packs its own sequences first-fit-decreasing into bins of size x cap tokens;
//   4. microbatch counts are made equal bottom-up, cheapest first: the half with fewer
//      microbatches splits bins (pop the last, shortest id); or it gets, as a bin of its own,
//      the shortest sequence of any multi-sequence bin in the other half (one more microbatch
//      on all its ranks for a few milliseconds); or takes single sequences from the other
//      half's multi-sequence bins on every rank path; or the half with more moves bins to it,
//      or lifts one bin off every rank (its own bin, or one from each of its halves,
//      recursively) into one new bin of the parent block (a bin may always run on a larger
//      group; all of them together fit it). This always succeeds;
//   5. a block runs its own bins first, then its halves side by side. So a group only ever
//      starts when all its members are free at the same moment: nothing waits, and the step
//      time is the largest per-rank sum along a root-to-leaf path, which step 2 balances.
// Candidates: buddy-tree layouts (with and without promoting long sequences; promotion
// thresholds as multiples of the mean per-rank work, and deadlines from the tight lower
// bound; both splits), Megatron's default_dynamic_cp greedy, and the static dp_balanced layout
// when the input allows it; the one with the least modelled step time wins. default_dynamic_cp
// as dyncp-train runs it is the greedy or the static layout, so on every batch cost_aware
// models at most its step, and (cp >= min group size, per-group padding) at most static CP's.
// Batches above kCostAwareFullSearchSamples try only the coarse promotion factors and the
// critical-path split (host time: a 30,720-sample batch must plan within 20 ms).

#include "packing/cost_model.hpp"
#include "packing/schedule.hpp"

namespace dyncp::packing {

// Largest batch for which cost_aware tries every candidate (see above).
inline constexpr std::size_t kCostAwareFullSearchSamples = 8192;

Schedule schedule_cost_aware(const SchedulerInput& input, const CostModel& cost_model);

// The buddy-tree layout alone (no comparison with other schedulers). A sequence whose time
// alone on its group exceeds promotion_factor x (mean per-rank work) moves to twice the group
// while that makes it faster (0: no promotion); `promoted` receives how many moved. Returns an
// empty schedule (no microbatch) when the pool is not a power of two.
// How the buddy tree chooses the block of each sequence (cost_aware.cpp, assign): LPT on
// rank-seconds half by half, or list scheduling on the busiest rank path.
enum class BuddyTreeSplit { rank_seconds, critical_path };

Schedule schedule_buddy_tree(const SchedulerInput& input, const CostModel& cost_model,
                             double promotion_factor, std::int64_t* promoted = nullptr,
                             BuddyTreeSplit split = BuddyTreeSplit::critical_path);

}  // namespace dyncp::packing
