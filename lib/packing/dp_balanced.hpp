#pragma once
// Static-CP packing, Megatron-Core's `dp_balanced` (DpBalancedScheduler), id for id:
//   1. next-fit in global-id order into bins of capacity C = cp x cap (and at most
//      max_sequences_per_bin ids when that is set): a sample that does not fit closes the bin;
//   2. while the bin count is not a multiple of dp, walk back from the last bin and split off
//      its last id into a new singleton bin appended at the end (bins with one id are skipped);
//   3. microbatch m gives bin m*dp + d to DP replica d, i.e. to ranks d*cp .. d*cp+cp-1.
// Differences from Megatron, all on inputs Megatron mishandles: a sample longer than C is a data
// error here (Megatron emits an empty bin and an over-capacity bin), and running out of ids
// to split is a data error naming the batch size (Megatron asserts "Not enough samples to move").

#include "packing/schedule.hpp"

namespace dyncp::packing {

Schedule schedule_dp_balanced(const SchedulerInput& input);

}  // namespace dyncp::packing
