#include "packing/static_fallback.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"

namespace dyncp::packing {

std::optional<Schedule> static_layout_candidate(const SchedulerInput& input) {
  // The static groups must also be groups dynamic CP may use (size >= min_group_size).
  if (input.context_parallel_size < input.min_group_size) return std::nullopt;
  const std::int64_t capacity = input.context_parallel_size * input.max_seqlen_per_dp_cp_rank;
  const bool fits = std::all_of(input.lengths.begin(), input.lengths.end(), [&](std::int64_t l) {
    return input.alignment.padded(l, input.context_parallel_size) <= capacity;
  });
  if (!fits) return std::nullopt;
  try {
    return schedule_dp_balanced(input);
  } catch (const core::Error&) {
    return std::nullopt;  // too few samples to make a multiple of dp bins
  }
}

Schedule schedule_default_dynamic_cp_or_static(const SchedulerInput& input,
                                               const CostModel& cost_model, bool* used_static) {
  Schedule megatron = schedule_default_dynamic_cp(input);
  if (used_static != nullptr) *used_static = false;
  if (!input.alignment.per_group()) return megatron;
  std::optional<Schedule> fixed = static_layout_candidate(input);
  if (!fixed) return megatron;
  const double dynamic_seconds =
      cost_model.step_time(megatron, input.lengths, input.alignment).step_seconds;
  const double static_seconds =
      cost_model.step_time(*fixed, input.lengths, input.alignment).step_seconds;
  if (!(static_seconds < dynamic_seconds)) return megatron;
  if (used_static != nullptr) *used_static = true;
  return std::move(*fixed);
}

}  // namespace dyncp::packing
