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
//   2. the pool is a binary tree of aligned blocks. A sequence whose size equals a block's
//      size runs on that block; the others are split between the block's two halves by LPT
//      on rank-seconds (largest first to the lighter half), recursively;
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
// bound), default_dynamic_cp, and the static dp_balanced layout when the input allows it; the
// one with the least modelled step time wins, so it never models worse than dp_balanced.
// Batches above kCostAwareFullSearchSamples try only the coarse promotion factors, the buddy
// tree and dp_balanced (host time: a 30,720-sample batch must plan in well under 20 ms), so
// there cost_aware is not compared with default_dynamic_cp.

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
Schedule schedule_buddy_tree(const SchedulerInput& input, const CostModel& cost_model,
                             double promotion_factor, std::int64_t* promoted = nullptr);

}  // namespace dyncp::packing
