#pragma once
// The static layout as a dynamic-CP candidate, and default_dynamic_cp with the guarantee that
// it never models slower than static CP.
//
// dp_balanced's layout (every group one DP replica's cp ranks, starting at a multiple of cp) is
// also a valid dynamic-CP schedule when cp >= min_dynamic_context_parallel_size and every
// sequence, padded for a group of cp ranks, fits cp x cap. Under per-group alignment a group
// of cp ranks pads exactly as static CP does (2 cp, times tp under sequence parallelism), so
// that candidate models exactly static CP's step.
//
// default_dynamic_cp with per-group padding keeps Megatron's greedy unchanged, and then checks
// it: when the static layout models a strictly shorter step (packing/cost_model.hpp), that
// layout runs instead (Megatron's greedy balances an L^2/c proxy microbatch by microbatch and
// keeps each long sequence on the smallest group it fits, which on long-tail mixes can model
// up to 1.37x static CP). Under the pool rule nothing is checked: the schedule is Megatron's,
// id for id.

#include <optional>

#include "packing/cost_model.hpp"
#include "packing/schedule.hpp"

namespace dyncp::packing {

// dp_balanced on `input`, when its layout is a valid dynamic schedule for it (see above);
// nothing otherwise (also when dp_balanced cannot split the batch into a multiple of dp bins).
std::optional<Schedule> static_layout_candidate(const SchedulerInput& input);

// default_dynamic_cp as dyncp-train runs it (packing.scheduler: default_dynamic_cp).
// `used_static`, when given, tells whether the static layout replaced Megatron's.
Schedule schedule_default_dynamic_cp_or_static(const SchedulerInput& input,
                                               const CostModel& cost_model,
                                               bool* used_static = nullptr);

}  // namespace dyncp::packing
