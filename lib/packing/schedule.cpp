#include "packing/schedule.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace dyncp::packing {

bool is_power_of_two(std::int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

std::span<const ScheduleGroup> Schedule::groups_of(std::int64_t microbatch) const {
  const auto begin = static_cast<std::size_t>(microbatch_offsets.at(microbatch));
  const auto end = static_cast<std::size_t>(microbatch_offsets.at(microbatch + 1));
  return std::span<const ScheduleGroup>(groups).subspan(begin, end - begin);
}

std::span<const std::int64_t> Schedule::ids_of(const ScheduleGroup& group) const {
  return std::span<const std::int64_t>(ids).subspan(static_cast<std::size_t>(group.ids_offset),
                                                    static_cast<std::size_t>(group.num_ids));
}

const ScheduleGroup& Schedule::group_of(std::int64_t microbatch, std::int64_t rank) const {
  const auto groups_here = groups_of(microbatch);
  auto it =
      std::upper_bound(groups_here.begin(), groups_here.end(), rank,
                       [](std::int64_t r, const ScheduleGroup& g) { return r < g.start_rank; });
  DYNCP_CHECK(it != groups_here.begin(), "rank before the first group");
  --it;
  DYNCP_CHECK(rank < it->start_rank + it->size, "rank not covered by any group");
  return *it;
}

std::vector<std::vector<std::vector<std::int64_t>>> Schedule::rank_lists() const {
  std::vector<std::vector<std::vector<std::int64_t>>> lists(
      static_cast<std::size_t>(num_microbatches()));
  for (std::int64_t m = 0; m < num_microbatches(); ++m) {
    auto& per_rank = lists[static_cast<std::size_t>(m)];
    per_rank.resize(static_cast<std::size_t>(pool_size));
    for (const auto& group : groups_of(m)) {
      const auto ids_here = ids_of(group);
      for (std::int64_t r = group.start_rank; r < group.start_rank + group.size; ++r) {
        per_rank[static_cast<std::size_t>(r)].assign(ids_here.begin(), ids_here.end());
      }
    }
  }
  return lists;
}

void Schedule::begin_microbatch() {}

void Schedule::add_group(std::int64_t start_rank, std::int64_t size,
                         std::span<const std::int64_t> group_ids) {
  groups.push_back(ScheduleGroup{start_rank, size, static_cast<std::int64_t>(ids.size()),
                                 static_cast<std::int64_t>(group_ids.size())});
  ids.insert(ids.end(), group_ids.begin(), group_ids.end());
}

void Schedule::end_microbatch() {
  microbatch_offsets.push_back(static_cast<std::int64_t>(groups.size()));
}

Schedule schedule_from_rank_lists(const std::vector<std::vector<std::vector<std::int64_t>>>& lists,
                                  std::int64_t pool_size) {
  Schedule schedule;
  schedule.pool_size = pool_size;
  for (std::size_t m = 0; m < lists.size(); ++m) {
    const auto& per_rank = lists[m];
    if (static_cast<std::int64_t>(per_rank.size()) != pool_size) {
      core::throw_data_error("microbatch " + std::to_string(m),
                             "lists " + std::to_string(per_rank.size()) + " ranks, expected " +
                                 std::to_string(pool_size));
    }
    schedule.begin_microbatch();
    std::size_t start = 0;
    while (start < per_rank.size()) {
      std::size_t end = start + 1;
      while (end < per_rank.size() && per_rank[end] == per_rank[start]) ++end;
      schedule.add_group(static_cast<std::int64_t>(start), static_cast<std::int64_t>(end - start),
                         per_rank[start]);
      start = end;
    }
    schedule.end_microbatch();
  }
  return schedule;
}

void validate_scheduler_input(const SchedulerInput& input) {
  if (input.data_parallel_size < 1) {
    core::throw_config_error("data_parallel_size",
                             std::to_string(input.data_parallel_size) + ": must be >= 1");
  }
  if (input.context_parallel_size < 1) {
    core::throw_config_error("context_parallel_size",
                             std::to_string(input.context_parallel_size) + ": must be >= 1");
  }
  if (input.max_seqlen_per_dp_cp_rank < 1) {
    core::throw_config_error("max_seqlen_per_dp_cp_rank",
                             std::to_string(input.max_seqlen_per_dp_cp_rank) +
                                 ": must be >= 1 (tokens one rank may hold per microbatch)");
  }
  // Bounds that keep every product in 64-bit integers (size x cap, L x L).
  if (input.pool_size() > (std::int64_t{1} << 20)) {
    core::throw_config_error("data_parallel_size x context_parallel_size",
                             std::to_string(input.pool_size()) +
                                 ": pools above 2^20 ranks are "
                                 "not supported");
  }
  if (input.max_seqlen_per_dp_cp_rank > (std::int64_t{1} << 40)) {
    core::throw_config_error(
        "max_seqlen_per_dp_cp_rank",
        std::to_string(input.max_seqlen_per_dp_cp_rank) + ": above 2^40 tokens is not supported");
  }
  if (input.min_group_size < 1 || input.min_group_size > input.pool_size()) {
    core::throw_config_error("min_dynamic_context_parallel_size",
                             std::to_string(input.min_group_size) + ": must lie in [1, dp x cp = " +
                                 std::to_string(input.pool_size()) + "]");
  }
  if (!is_power_of_two(input.min_group_size)) {
    core::throw_config_error("min_dynamic_context_parallel_size",
                             std::to_string(input.min_group_size) + ": must be a power of two");
  }
  if (input.max_sequences_per_bin < 0) {
    core::throw_config_error("thd_max_packed_sequences",
                             std::to_string(input.max_sequences_per_bin) + ": must be >= 0");
  }
  if (input.alignment.pool_multiple < 1 || input.alignment.sequence_parallel_factor < 1) {
    core::throw_config_error("alignment multiple",
                             std::to_string(input.alignment.pool_multiple) + " / " +
                                 std::to_string(input.alignment.sequence_parallel_factor) +
                                 ": must be >= 1");
  }
  if (input.lengths.empty()) {
    core::throw_data_error("global batch", "is empty: a step needs at least one sample");
  }
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    if (input.lengths[i] < 1) {
      core::throw_data_error("sample at position " + std::to_string(i),
                             "length " + std::to_string(input.lengths[i]) +
                                 " is not positive; drop empty samples before scheduling");
    }
    if (input.lengths[i] > (std::int64_t{1} << 31)) {
      core::throw_data_error("sample at position " + std::to_string(i),
                             "length " + std::to_string(input.lengths[i]) +
                                 " is above 2^31 tokens, which is not supported");
    }
  }
}

std::int64_t group_size_needed(std::int64_t length, std::int64_t cap, std::int64_t min_group_size) {
  // (length - 1) / cap + 1 == ceil(length / cap) without overflow for any positive length.
  const std::int64_t ranks = length < 1 ? 1 : (length - 1) / cap + 1;
  constexpr std::int64_t beyond_any_pool = std::int64_t{1} << 41;
  if (ranks > beyond_any_pool / 2) return std::max(min_group_size, beyond_any_pool);
  std::int64_t size = 1;
  while (size < ranks) size *= 2;
  return std::max(min_group_size, size);
}

std::int64_t group_size_needed(std::int64_t length, std::int64_t cap, std::int64_t min_group_size,
                               const AlignmentRule& alignment) {
  if (!alignment.per_group()) {
    return group_size_needed(alignment.padded(length, 1), cap, min_group_size);
  }
  std::int64_t size = group_size_needed(length, cap, min_group_size);
  // L(n, 2c) <= L(n, c) + 2c tp while c x cap doubles, so this ends within a few doublings.
  constexpr std::int64_t beyond_any_pool = std::int64_t{1} << 41;
  while (size < beyond_any_pool && alignment.padded(length, size) > size * cap) size *= 2;
  return size;
}

std::string check_schedule(const Schedule& schedule, std::span<const std::int64_t> lengths,
                           std::int64_t cap, const ScheduleCheckOptions& options) {
  std::ostringstream problem;
  const std::int64_t pool = schedule.pool_size;
  if (pool < 1) return "pool size must be >= 1";
  if (schedule.num_microbatches() < 1) return "schedule has no microbatch";
  std::vector<std::int64_t> seen_in(lengths.size(), -1);
  for (std::int64_t m = 0; m < schedule.num_microbatches(); ++m) {
    std::int64_t next_rank = 0;
    for (const auto& group : schedule.groups_of(m)) {
      problem << "microbatch " << m << ", group at rank " << group.start_rank << " of size "
              << group.size << ": ";
      if (group.start_rank != next_rank) {
        problem << "expected to start at rank " << next_rank << " (groups must tile the pool)";
        return problem.str();
      }
      if (group.size < 1 || group.start_rank + group.size > pool) {
        problem << "does not fit in the pool of " << pool << " ranks";
        return problem.str();
      }
      if (options.static_group_size > 0) {
        if (group.size != options.static_group_size) {
          problem << "static layout requires size " << options.static_group_size;
          return problem.str();
        }
      } else if (!(group.size == pool && group.start_rank == 0) &&
                 (!is_power_of_two(group.size) || group.start_rank % group.size != 0)) {
        problem << "is not an aligned power-of-two block (nor the whole pool)";
        return problem.str();
      }
      if (group.num_ids < 1) {
        problem << "has no sample: its ranks would be idle";
        return problem.str();
      }
      std::int64_t tokens = 0;
      for (const auto id : schedule.ids_of(group)) {
        if (id < 0 || id >= static_cast<std::int64_t>(lengths.size())) {
          problem << "id " << id << " is not a position in the batch of " << lengths.size();
          return problem.str();
        }
        auto& where = seen_in[static_cast<std::size_t>(id)];
        if (where >= 0) {
          problem << "id " << id << " was already scheduled in microbatch " << where;
          return problem.str();
        }
        where = m;
        const std::int64_t real = lengths[static_cast<std::size_t>(id)];
        const std::int64_t length = options.alignment.padded(real, group.size);
        tokens += length;
        const std::int64_t needed =
            group_size_needed(real, cap, options.min_group_size, options.alignment);
        if (options.static_group_size == 0 && group.size < needed && group.size != pool) {
          problem << "id " << id << " of length " << length << " needs a group of at least "
                  << needed;
          return problem.str();
        }
      }
      if (tokens > cap * group.size) {
        problem << "holds " << tokens << " tokens, above size x cap = " << cap * group.size;
        return problem.str();
      }
      next_rank = group.start_rank + group.size;
      problem.str("");
    }
    if (next_rank != pool) {
      problem << "microbatch " << m << ": ranks " << next_rank << ".." << pool - 1
              << " have no group (idle)";
      return problem.str();
    }
  }
  for (std::size_t id = 0; id < seen_in.size(); ++id) {
    if (seen_in[id] < 0) {
      problem << "id " << id << " is never scheduled";
      return problem.str();
    }
  }
  return "";
}

}  // namespace dyncp::packing
