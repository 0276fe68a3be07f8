#include "packing/dp_balanced.hpp"

#include "core/error.hpp"

namespace dyncp::packing {

Schedule schedule_dp_balanced(const SchedulerInput& input) {
  validate_scheduler_input(input);
  const std::int64_t dp = input.data_parallel_size;
  const std::int64_t cp = input.context_parallel_size;
  const std::int64_t bin_capacity = cp * input.max_seqlen_per_dp_cp_rank;
  const auto num_samples = static_cast<std::int64_t>(input.lengths.size());

  // Bins as id ranges are not enough (splitting moves ids to the end), so keep id lists.
  std::vector<std::vector<std::int64_t>> bins;
  std::vector<std::int64_t> current;
  std::int64_t current_tokens = 0;
  for (std::int64_t id = 0; id < num_samples; ++id) {
    const std::int64_t length = input.padded(static_cast<std::size_t>(id), cp);
    if (length > bin_capacity) {
      core::throw_data_error(
          "sample at position " + std::to_string(id),
          "length " + std::to_string(length) + " exceeds cp x max_seqlen_per_dp_cp_rank = " +
              std::to_string(cp) + " x " + std::to_string(input.max_seqlen_per_dp_cp_rank) + " = " +
              std::to_string(bin_capacity) +
              "; raise max_seqlen_per_dp_cp_rank or context_parallel_size, or truncate it");
    }
    const bool count_ok = input.max_sequences_per_bin == 0 ||
                          static_cast<std::int64_t>(current.size()) < input.max_sequences_per_bin;
    if (current_tokens + length <= bin_capacity && count_ok) {
      current.push_back(id);
      current_tokens += length;
    } else {
      bins.push_back(std::move(current));
      current.assign(1, id);
      current_tokens = length;
    }
  }
  if (!current.empty()) bins.push_back(std::move(current));

  if (static_cast<std::int64_t>(bins.size()) % dp != 0) {
    std::int64_t missing = dp - static_cast<std::int64_t>(bins.size()) % dp;
    auto index = static_cast<std::int64_t>(bins.size()) - 1;
    while (missing > 0) {
      if (index < 0) {
        core::throw_data_error("global batch", std::to_string(num_samples) + " samples make " +
                                                   std::to_string(bins.size()) +
                                                   " bins, which cannot be split into a "
                                                   "multiple of data_parallel_size = " +
                                                   std::to_string(dp) +
                                                   "; use a global batch of at least dp samples");
      }
      auto& bin = bins[static_cast<std::size_t>(index)];
      if (bin.size() > 1) {
        const std::int64_t moved = bin.back();
        bin.pop_back();
        bins.push_back({moved});
        --missing;
      } else {
        --index;
      }
    }
  }

  Schedule schedule;
  schedule.pool_size = dp * cp;
  schedule.ids.reserve(static_cast<std::size_t>(num_samples));
  const auto num_microbatches = static_cast<std::int64_t>(bins.size()) / dp;
  for (std::int64_t m = 0; m < num_microbatches; ++m) {
    schedule.begin_microbatch();
    for (std::int64_t d = 0; d < dp; ++d) {
      schedule.add_group(d * cp, cp, bins[static_cast<std::size_t>(m * dp + d)]);
    }
    schedule.end_microbatch();
  }
  return schedule;
}

}  // namespace dyncp::packing
