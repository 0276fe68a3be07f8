#include "packing/default_dynamic_cp.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "packing/group_load_tree.hpp"

namespace dyncp::packing {
namespace {

// Megatron's per-rank workload ceiling: tallest x cap x (1 + 0.05).
constexpr double kWorkloadSlack = 1.0 + 0.05;

int log2_of(std::int64_t power_of_two) {
  int k = 0;
  while ((std::int64_t{1} << k) < power_of_two) ++k;
  return k;
}

// Positions of the sorted order not yet scheduled, with "next unscheduled at or after i" in
// near-constant time (union-find with path halving), so nothing is copied between microbatches.
class UnscheduledPositions {
 public:
  explicit UnscheduledPositions(std::size_t count) : next_(count + 1) {
    std::iota(next_.begin(), next_.end(), std::size_t{0});
  }
  std::size_t next(std::size_t position) {
    while (next_[position] != position) {
      next_[position] = next_[next_[position]];
      position = next_[position];
    }
    return position;  // == count when none is left
  }
  void mark(std::size_t position) { next_[position] = position + 1; }

 private:
  std::vector<std::size_t> next_;
};

struct Group {
  std::int64_t start = 0;
  std::int64_t size = 0;
  std::int64_t tokens = 0;
  double load = 0.0;  // per-rank workload, identical on every member
  std::int64_t first_id = -1;
  std::int64_t last_id = -1;
  std::int64_t slot = 0;  // position in its size class's tree
};

class MicrobatchBuilder {
 public:
  MicrobatchBuilder(const SchedulerInput& input, std::span<const std::int64_t> needed)
      : input_(input),
        needed_(needed),
        pool_(input.pool_size()),
        cap_(input.max_seqlen_per_dp_cp_rank),
        min_size_(input.min_group_size),
        next_id_(input.lengths.size(), -1) {
    for (std::int64_t c = 1; c <= pool_; c *= 2) {
      trees_.emplace_back();
      trees_.back().reserve(pool_ / c);
      class_size_.push_back(c);
    }
    class_groups_.resize(trees_.size());
    groups_.reserve(static_cast<std::size_t>(pool_));
  }

  // Forms one microbatch from the unscheduled samples (positions of `order` not yet marked in
  // `scheduled`), appends it to `schedule` and marks what it scheduled.
  void form(std::span<const std::int64_t> order, UnscheduledPositions& scheduled,
            Schedule& schedule) {
    reset();
    const std::size_t count = order.size();
    const std::size_t head = scheduled.next(0);
    const std::int64_t head_need = needed(order[head]);
    const std::int64_t tall = length(order[head], head_need);
    limit_ = static_cast<double>(tall) * static_cast<double>(cap_) * kWorkloadSlack;
    open_group(order[head], head_need, work(tall, head_need));
    placed_.assign(1, head);

    std::size_t i = scheduled.next(head + 1);
    while (i < count) {
      const std::int64_t id = order[i];
      const std::int64_t need = needed(id);
      if (pool_ - used_ < need) {
        const std::int64_t fit = longest_fitting(need);
        if (real_length(id) > fit) {
          // Every following sample of the same needed size that fits no group either is
          // skipped with it: order is sorted by length, so those samples are a run here.
          const auto end = std::partition_point(
              order.begin() + static_cast<std::ptrdiff_t>(i), order.end(), [&](std::int64_t other) {
                return needed(other) == need && real_length(other) > fit;
              });
          i = scheduled.next(static_cast<std::size_t>(end - order.begin()));
          continue;
        }
      }
      if (place(id, need)) placed_.push_back(i);
      i = scheduled.next(i + 1);
    }

    while (used_ < pool_) {
      if (!expand_smallest_group()) {
        full_pool_fallback(order, scheduled, schedule);
        return;
      }
    }
    for (const std::size_t position : placed_) scheduled.mark(position);
    emit(schedule);
  }

 private:
  // Tokens of sample `id` on a group of `size` ranks (its padding depends on the group).
  std::int64_t length(std::int64_t id, std::int64_t size) const {
    return input_.padded(static_cast<std::size_t>(id), size);
  }
  std::int64_t needed(std::int64_t id) const { return needed_[static_cast<std::size_t>(id)]; }
  static double work(std::int64_t len, std::int64_t size) {
    return static_cast<double>(len * len) / static_cast<double>(size);
  }

  void reset() {
    for (auto& tree : trees_) tree.clear();
    for (auto& members : class_groups_) members.clear();
    groups_.clear();
    used_ = 0;
    max_load_ = 0.0;
  }

  void append_id(Group& group, std::int64_t id) {
    next_id_[static_cast<std::size_t>(id)] = -1;
    if (group.last_id < 0) {
      group.first_id = id;
    } else {
      next_id_[static_cast<std::size_t>(group.last_id)] = id;
    }
    group.last_id = id;
  }

  void open_group(std::int64_t id, std::int64_t size, double w) {
    Group group;
    group.start = used_;
    group.size = size;
    group.tokens = length(id, size);
    group.load = 0.0 + w;
    append_id(group, id);
    const auto k = static_cast<std::size_t>(log2_of(size));
    group.slot = trees_[k].push(group.tokens, group.load);
    groups_.push_back(group);
    class_groups_[k].push_back(static_cast<std::int64_t>(groups_.size()) - 1);
    used_ += size;
    max_load_ = std::max(max_load_, group.load);
  }

  std::int64_t real_length(std::int64_t id) const {
    return input_.lengths[static_cast<std::size_t>(id)];
  }

  // The longest length that some existing group of size >= need has room for, padded for that
  // group (-1: none). A length n padded to a multiple m fits a room R iff n <= floor(R / m) m,
  // so this is the largest such bound over the size classes.
  std::int64_t longest_fitting(std::int64_t need) const {
    std::int64_t longest = -1;
    for (std::size_t k = static_cast<std::size_t>(log2_of(need)); k < trees_.size(); ++k) {
      if (trees_[k].size() == 0) continue;
      const std::int64_t room = class_size_[k] * cap_ - trees_[k].min_tokens();
      const std::int64_t multiple = input_.alignment.multiple(class_size_[k]);
      if (room >= 0) longest = std::max(longest, room / multiple * multiple);
    }
    return longest;
  }

  bool place(std::int64_t id, std::int64_t need) {
    bool found = false;
    double best_projected = 0.0;
    std::int64_t best_size = 0;
    std::int64_t best_group = -1;  // -1: a new group
    // No candidate projects below the current maximum load, and ties keep the earlier one:
    // once the best reaches it, later (larger) sizes cannot win.
    for (std::int64_t c = need; c <= pool_ && !(found && best_projected == max_load_); c *= 2) {
      const std::int64_t len = length(id, c);
      const double w = work(len, c);
      const auto k = static_cast<std::size_t>(log2_of(c));
      const GroupLoadTree& tree = trees_[k];
      const std::int64_t max_tokens = c * cap_ - len;
      std::int64_t slot = tree.first_with_room_and_load(max_tokens, w, max_load_);
      double projected = max_load_;
      if (slot == GroupLoadTree::none) {
        slot = tree.least_load_with_room(max_tokens);
        if (slot != GroupLoadTree::none) {
          projected =
              groups_[static_cast<std::size_t>(class_groups_[k][static_cast<std::size_t>(slot)])]
                  .load +
              w;
        }
      }
      if (slot != GroupLoadTree::none && projected <= limit_ &&
          (!found || projected < best_projected)) {
        found = true;
        best_projected = projected;
        best_size = c;
        best_group = class_groups_[k][static_cast<std::size_t>(slot)];
      }
      if (pool_ - used_ >= c && len <= c * cap_) {  // always fits under the pool rule
        const double projected_new = std::max(0.0 + w, max_load_);
        if (projected_new <= limit_ && (!found || projected_new < best_projected)) {
          found = true;
          best_projected = projected_new;
          best_size = c;
          best_group = -1;
        }
      }
    }
    if (!found) return false;
    const std::int64_t len = length(id, best_size);
    const double w = work(len, best_size);
    if (best_group < 0) {
      open_group(id, best_size, w);
    } else {
      Group& group = groups_[static_cast<std::size_t>(best_group)];
      group.tokens += len;
      group.load += w;
      append_id(group, id);
      trees_[static_cast<std::size_t>(log2_of(best_size))].set(group.slot, group.tokens,
                                                               group.load);
      max_load_ = std::max(max_load_, group.load);
    }
    return true;
  }

  // Megatron's fill_empty_gpus_once: the leftmost group of the smallest size grows to the next
  // size; the groups after it shift right. False when that would leave the pool.
  bool expand_smallest_group() {
    std::int64_t smallest = pool_;
    for (const auto& group : groups_) smallest = std::min(smallest, group.size);
    const std::int64_t target = std::min(2 * smallest, pool_);
    const std::int64_t extra = target - smallest;
    if (extra <= 0 || used_ + extra > pool_) return false;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      Group& group = groups_[g];
      if (group.size != smallest) continue;
      if (group.start + group.size - 1 + extra >= pool_) return false;  // later ones start later
      // Per-group padding: the members are padded for the larger group now. From c >= 2 they
      // always fit (each grows by at most 2c tp tokens and holds at least that many); a single
      // rank's many tiny sequences may not, and then the next group of this size grows instead.
      double load = 0.0;
      std::int64_t tokens = 0;
      for (std::int64_t id = group.first_id; id >= 0; id = next_id_[static_cast<std::size_t>(id)]) {
        load += work(length(id, target), target);
        tokens += length(id, target);
      }
      if (tokens > target * cap_) continue;
      group.size = target;
      group.load = load;
      group.tokens = tokens;
      for (std::size_t later = g + 1; later < groups_.size(); ++later)
        groups_[later].start += extra;
      used_ += extra;
      return true;
    }
    return false;
  }

  // Megatron's fill_with_full_dpxcp_group: one group of the whole pool, first-fit in order
  // over everything this microbatch started from; the greedy assignment is discarded.
  void full_pool_fallback(std::span<const std::int64_t> order, UnscheduledPositions& scheduled,
                          Schedule& schedule) {
    selected_.clear();
    placed_.clear();
    double per_rank_tokens = 0.0;
    for (std::size_t i = scheduled.next(0); i < order.size(); i = scheduled.next(i + 1)) {
      const std::int64_t id = order[i];
      const double share = static_cast<double>(length(id, pool_)) / static_cast<double>(pool_);
      if (per_rank_tokens + share <= static_cast<double>(cap_)) {
        selected_.push_back(id);
        placed_.push_back(i);
        per_rank_tokens += share;
      }
    }
    if (selected_.empty()) {
      const std::int64_t first = order[scheduled.next(0)];
      core::throw_data_error("sample at position " + std::to_string(first),
                             "length " + std::to_string(length(first, pool_)) +
                                 " does not fit even on the whole pool of " +
                                 std::to_string(pool_) + " ranks; raise max_seqlen_per_dp_cp_rank");
    }
    for (const std::size_t position : placed_) scheduled.mark(position);
    schedule.begin_microbatch();
    schedule.add_group(0, pool_, selected_);
    schedule.end_microbatch();
  }

  void emit(Schedule& schedule) {
    schedule.begin_microbatch();
    for (const auto& group : groups_) {
      selected_.clear();
      for (std::int64_t id = group.first_id; id >= 0; id = next_id_[static_cast<std::size_t>(id)]) {
        selected_.push_back(id);
      }
      schedule.add_group(group.start, group.size, selected_);
    }
    schedule.end_microbatch();
  }

  const SchedulerInput& input_;
  std::span<const std::int64_t> needed_;
  std::int64_t pool_;
  std::int64_t cap_;
  std::int64_t min_size_;
  std::vector<std::int64_t> next_id_;  // per-group id lists as linked lists over ids
  std::vector<GroupLoadTree> trees_;   // one per size 1, 2, 4, ... <= pool
  std::vector<std::int64_t> class_size_;
  std::vector<std::vector<std::int64_t>> class_groups_;  // tree slot -> index in groups_
  std::vector<Group> groups_;                            // creation order = left to right
  std::vector<std::int64_t> selected_;
  std::vector<std::size_t> placed_;  // positions scheduled in the microbatch being formed
  std::int64_t used_ = 0;
  double max_load_ = 0.0;
  double limit_ = 0.0;
};

}  // namespace

Schedule schedule_default_dynamic_cp(const SchedulerInput& input) {
  validate_scheduler_input(input);
  const std::int64_t pool = input.pool_size();
  const std::int64_t cap = input.max_seqlen_per_dp_cp_rank;
  const auto num_samples = static_cast<std::int64_t>(input.lengths.size());

  std::vector<std::int64_t> needed(input.lengths.size());
  for (std::int64_t id = 0; id < num_samples; ++id) {
    const std::int64_t length = input.lengths[static_cast<std::size_t>(id)];
    needed[static_cast<std::size_t>(id)] =
        group_size_needed(length, cap, input.min_group_size, input.alignment);
    if (needed[static_cast<std::size_t>(id)] > pool) {
      core::throw_data_error(
          "sample at position " + std::to_string(id),
          "length " + std::to_string(length) + " needs a group of " +
              std::to_string(needed[static_cast<std::size_t>(id)]) +
              " ranks (a power of two >= length / max_seqlen_per_dp_cp_rank = " +
              std::to_string(length) + " / " + std::to_string(cap) + "), but the pool has " +
              std::to_string(pool) +
              "; raise max_seqlen_per_dp_cp_rank or the pool, or truncate the sample");
    }
  }

  std::vector<std::int64_t> order(input.lengths.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  // Longest first by the length on one rank: under the pool rule that is the padded length
  // Megatron sorts by (equal padded lengths keep id order), per group the real length.
  std::vector<std::int64_t> sort_key(input.lengths.size());
  for (std::size_t id = 0; id < sort_key.size(); ++id) sort_key[id] = input.padded(id, 1);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return sort_key[static_cast<std::size_t>(a)] > sort_key[static_cast<std::size_t>(b)];
  });

  Schedule schedule;
  schedule.pool_size = pool;
  schedule.ids.reserve(input.lengths.size());
  MicrobatchBuilder builder(input, needed);
  UnscheduledPositions scheduled(order.size());
  while (scheduled.next(0) < order.size()) builder.form(order, scheduled, schedule);
  return schedule;
}

}  // namespace dyncp::packing
