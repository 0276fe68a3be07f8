#pragma once
// Dynamic-CP packing, Megatron-Core dev's `default_dynamic_cp` (DefaultDynamicCPScheduler with
// next_hdp_group_packing_aware), reproduced id for id. P = dp x cp pool ranks, cap =
// max_seqlen_per_dp_cp_rank, needed(L) = group_size_needed(L, cap, min_group_size),
// work(L, c) = L*L / c (double), load(rank) = sum of work of its sequences.
//
// Samples are sorted by length, longest first (stable: equal lengths keep id order). Each
// microbatch is formed from everything still unscheduled:
//   1. the longest opens group 0 on ranks [0, needed); limit = tall * cap * 1.05;
//   2. every other sample, longest first, takes the candidate with the strictly smallest
//      projected maximum rank load (<= limit), candidates tried in this order: c = needed(L),
//      2c, ... <= P; within a c, "add" to an existing group of size c (creation order) whose
//      tokens stay <= c x cap, then "new" group on the lowest c free ranks. No candidate:
//      the sample waits for a later microbatch;
//   3. while ranks are idle, double the leftmost smallest group (ranks after it shift right);
//      when that cannot proceed (pools that are not a power of two), the microbatch is replaced
//      by one group of the whole pool holding, first-fit in sorted order, the samples with
//      sum(L / P) <= cap.
//
// Speed: Megatron rescans every rank for every candidate (minutes at 30k x 1k). Here each
// group size class keeps its groups in creation order in a segment tree of (min tokens,
// max tokens, min load), so "best add" is two tree descents, and a sample that fits nowhere
// (no free ranks for it, no group with room) is skipped together with every following sample
// of the same needed size that is also too long, by binary search; scheduled samples are
// skipped through a union-find "next unscheduled" array, so nothing is copied per microbatch. The
// projected maximum reduces to: max load M if some fitting group has load + w <= M (the first such
// wins), else the fitting group of least load (first on ties) with load + w. All loads are sums of
// L*L/c with c a power of two, exact in double for L below 2^26, so the ordering is Megatron's.
//
// Padding: lengths are padded per candidate group by input.alignment (packing/alignment.hpp);
// under the pool rule (or pre-padded lengths) every group sees Megatron's padded length, so
// the schedule is Megatron's id for id. A group that doubles re-pads its members for the new
// size; when a one-rank group's many tiny sequences no longer fit, the next group of that size
// doubles instead (only possible per group: the pool rule never changes a length).
//
// Pools that are not a power of two: when doubling a group would push later groups past the
// last rank, the reference Megatron dev indexes past its rank list; later Megatron skips that
// expansion and falls back to the full pool, and so do we.
//
// Errors (Megatron asserts or crashes): a sample whose needed group exceeds the pool, a
// min_group_size above the pool, empty batch, non-positive length.

#include "packing/schedule.hpp"

namespace dyncp::packing {

Schedule schedule_default_dynamic_cp(const SchedulerInput& input);

}  // namespace dyncp::packing
