#include "packing/cost_aware.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"

namespace dyncp::packing {
namespace {

struct Item {
  std::int64_t id = 0;
  std::int64_t length = 0;  // padded for its group
  std::int64_t group_size = 1;
  double rank_seconds = 0.0;  // the sequence's share of the step, summed over its group
};

// A bin's ids are a linked list through BuddyTree::next_id_ (no allocation per bin).
struct Bin {
  std::int64_t first = -1;
  std::int64_t last = -1;
  std::int64_t tokens = 0;
  std::int64_t count = 0;
};

// Blocks in heap order: node 1 is the pool, node n has halves 2n and 2n+1.
class BuddyTree {
 public:
  BuddyTree(const SchedulerInput& input, const CostModel& cost_model)
      : input_(input),
        cost_(cost_model),
        pool_(input.pool_size()),
        cap_(input.max_seqlen_per_dp_cp_rank),
        next_id_(input.lengths.size(), -1) {
    const std::int64_t nodes = 2 * (pool_ / input.min_group_size);
    bins_.resize(static_cast<std::size_t>(nodes));
    count_.assign(static_cast<std::size_t>(nodes), 0);
  }

  // Tokens of sample `id` on a group of `size` (padded for that group).
  std::int64_t length_on(std::int64_t id, std::int64_t size) const {
    return input_.padded(static_cast<std::size_t>(id), size);
  }
  // The group size of block `node` (heap order: the pool halves at every level).
  std::int64_t node_size(std::size_t node) const {
    std::int64_t size = pool_;
    for (; node > 1; node /= 2) size /= 2;
    return size;
  }

  // Per-rank fixed seconds of one bin on a group of `size`.
  double bin_overhead(std::int64_t size) const {
    return cost_.parameters().microbatch_overhead_seconds + cost_.communication_seconds(0, size);
  }

  double rank_seconds(std::int64_t length, std::int64_t size) const {
    const double per_rank =
        cost_.compute_seconds(length, size) + cost_.transfer_seconds(length, size);
    // Amortised fixed cost: the sequence fills length / (size * cap) of a bin.
    return static_cast<double>(size) * per_rank +
           bin_overhead(size) * static_cast<double>(length) / static_cast<double>(cap_);
  }

  // A sequence whose time alone on its group exceeds the threshold moves to twice the group
  // while that makes it faster. The threshold is `deadline_seconds` when positive, else
  // promotion_factor x (mean per-rank work) (promotion_factor 0: never).
  void build(double promotion_factor, double deadline_seconds, Schedule& schedule,
             std::int64_t& promoted) {
    promoted = 0;
    items_.resize(input_.lengths.size());
    double total = 0.0;
    for (std::size_t id = 0; id < input_.lengths.size(); ++id) {
      Item& item = items_[id];
      item.id = static_cast<std::int64_t>(id);
      item.group_size =
          group_size_needed(input_.lengths[id], cap_, input_.min_group_size, input_.alignment);
      item.length = length_on(item.id, item.group_size);
      item.rank_seconds = rank_seconds(item.length, item.group_size);
      total += item.rank_seconds;
    }
    if (promotion_factor > 0.0 || deadline_seconds > 0.0) {
      const double threshold = deadline_seconds > 0.0
                                   ? deadline_seconds
                                   : promotion_factor * total / static_cast<double>(pool_);
      for (auto& item : items_) {
        auto alone = [&](std::int64_t size) {
          const std::int64_t length = length_on(item.id, size);
          return cost_.compute_seconds(length, size) + cost_.communication_seconds(length, size);
        };
        const std::int64_t needed = item.group_size;
        while (item.group_size < pool_ && alone(item.group_size) > threshold &&
               alone(2 * item.group_size) < alone(item.group_size)) {
          item.group_size *= 2;
        }
        if (item.group_size != needed) {
          ++promoted;
          item.length = length_on(item.id, item.group_size);
          item.rank_seconds = rank_seconds(item.length, item.group_size);
        }
      }
    }
    order_.resize(items_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<std::int32_t>(i);
    std::stable_sort(order_.begin(), order_.end(), [&](std::int32_t a, std::int32_t b) {
      return items_[static_cast<std::size_t>(a)].rank_seconds >
             items_[static_cast<std::size_t>(b)].rank_seconds;
    });
    scratch_.resize(order_.size());
    side_.resize(order_.size());
    assign(1, pool_, 0, order_.size());
    equalize(1);
    emit(schedule);
  }

 private:
  bool is_leaf(std::size_t node) const { return 2 * node >= bins_.size(); }
  const Item& item_at(std::size_t position) const {
    return items_[static_cast<std::size_t>(order_[position])];
  }

  // order_[lo, hi) holds this block's sequences, largest rank-seconds first. Those whose
  // group is this block stay; LPT sends each other one to the lighter half. The range is
  // reordered in place into [own | left half | right half].
  void assign(std::size_t node, std::int64_t size, std::size_t lo, std::size_t hi) {
    double load[3] = {0.0, 0.0, 0.0};
    std::size_t count[3] = {0, 0, 0};
    const bool leaf = is_leaf(node);
    for (std::size_t p = lo; p < hi; ++p) {
      const Item& item = item_at(p);
      std::uint8_t side = 0;
      if (!leaf && item.group_size < size) side = load[1] <= load[2] ? 1 : 2;
      side_[p] = side;
      load[side] += item.rank_seconds;
      ++count[side];
    }
    std::size_t cursor[3] = {lo, lo + count[0], lo + count[0] + count[1]};
    for (std::size_t p = lo; p < hi; ++p) scratch_[cursor[side_[p]]++] = order_[p];
    std::copy(scratch_.begin() + static_cast<std::ptrdiff_t>(lo),
              scratch_.begin() + static_cast<std::ptrdiff_t>(hi),
              order_.begin() + static_cast<std::ptrdiff_t>(lo));
    pack_first_fit_decreasing(node, size, lo, lo + count[0]);
    if (leaf) return;
    assign(2 * node, size / 2, lo + count[0], lo + count[0] + count[1]);
    assign(2 * node + 1, size / 2, lo + count[0] + count[1], hi);
  }

  void append(Bin& bin, std::int64_t id, std::int64_t length) {
    next_id_[static_cast<std::size_t>(id)] = -1;
    if (bin.last < 0) {
      bin.first = id;
    } else {
      next_id_[static_cast<std::size_t>(bin.last)] = id;
    }
    bin.last = id;
    bin.tokens += length;
    ++bin.count;
  }

  // Own sequences all have this block's group size, so rank-seconds order is length order.
  void pack_first_fit_decreasing(std::size_t node, std::int64_t size, std::size_t lo,
                                 std::size_t hi) {
    auto& bins = bins_[node];
    const std::int64_t capacity = size * cap_;
    std::size_t first_open = 0;  // bins before it have no room for any remaining sequence
    for (std::size_t p = lo; p < hi; ++p) {
      const Item& item = item_at(p);
      std::size_t b = first_open;
      while (b < bins.size() && bins[b].tokens + item.length > capacity) ++b;
      if (b == bins.size()) bins.emplace_back();
      append(bins[b], item.id, item.length);
      while (first_open < bins.size() && bins[first_open].tokens >= capacity) ++first_open;
    }
  }

  // How many microbatches this block can add to all of its ranks by splitting bins.
  std::int64_t growth_room(std::size_t node) const {
    std::int64_t room = 0;
    for (const auto& bin : bins_[node]) room += bin.count - 1;
    if (!is_leaf(node)) room += std::min(growth_room(2 * node), growth_room(2 * node + 1));
    return room;
  }

  // Adds exactly `extra` microbatches to every rank of the block (the caller checked the room):
  // bins give up their last (shortest) id to a new bin, own bins first.
  void grow(std::size_t node, std::int64_t extra) {
    auto& bins = bins_[node];
    for (std::size_t b = 0; b < bins.size() && extra > 0;) {
      if (bins[b].count < 2) {
        ++b;
        continue;
      }
      const std::int64_t moved = pop_last(bins[b], node);
      Bin single;
      append(single, moved, length_on(moved, node_size(node)));
      bins.push_back(single);
      --extra;
    }
    if (extra > 0) {
      grow(2 * node, extra);
      grow(2 * node + 1, extra);
    }
    count_[node] = static_cast<std::int64_t>(bins.size()) + (is_leaf(node) ? 0 : count_[2 * node]);
  }

  // Removes one microbatch from every rank of `node` (its counts are equal and >= 1) by moving
  // an own bin, or one bin from each half, to the block `target` above it. The bin's sequences
  // are padded for the larger group there; from a group of 2 or more they always fit (each
  // grows by at most its old multiple and holds at least that many tokens), but many tiny
  // sequences from one rank may not: such a bin is split first-fit at the target, which adds
  // microbatches to every rank of the target alike and so keeps the counts equal below it.
  void lift_one(std::size_t node, std::size_t target) {
    auto& own = bins_[node];
    if (!own.empty()) {
      const Bin lifted = own.back();
      own.pop_back();
      const std::int64_t size = node_size(target);
      auto& bins = bins_[target];
      bins.emplace_back();
      for (std::int64_t id = lifted.first; id >= 0;) {
        const std::int64_t next = next_id_[static_cast<std::size_t>(id)];
        const std::int64_t length = length_on(id, size);
        if (bins.back().count > 0 && bins.back().tokens + length > size * cap_) bins.emplace_back();
        append(bins.back(), id, length);
        id = next;
      }
    } else {
      lift_one(2 * node, target);
      lift_one(2 * node + 1, target);
    }
    --count_[node];
  }

  // Takes the last (shortest) id of a multi-sequence bin on every rank path of `from` and
  // opens a bin with it on every rank path of its sibling `to` (same shape): `to` gains one
  // microbatch on every rank, `from` keeps its count. The caller checked growth_room(from).
  void steal_one(std::size_t from, std::size_t to) {
    auto& own = bins_[from];
    for (auto& bin : own) {
      if (bin.count < 2) continue;
      const std::int64_t moved = pop_last(bin, from);
      Bin single;
      append(single, moved, length_on(moved, node_size(to)));
      bins_[to].push_back(single);
      ++count_[to];
      return;
    }
    steal_one(2 * from, 2 * to);
    steal_one(2 * from + 1, 2 * to + 1);
    ++count_[to];
  }

  std::int64_t pop_last(Bin& bin, std::size_t node) {
    std::int64_t before_last = bin.first;
    while (next_id_[static_cast<std::size_t>(before_last)] != bin.last) {
      before_last = next_id_[static_cast<std::size_t>(before_last)];
    }
    const std::int64_t moved = bin.last;
    next_id_[static_cast<std::size_t>(before_last)] = -1;
    bin.last = before_last;
    bin.tokens -= length_on(moved, node_size(node));
    --bin.count;
    return moved;
  }

  // Moves one microbatch from every rank of `from` to every rank of its sibling `to` (same
  // shape): the lightest own bin of `from` to `to`'s own bins, or else one bin on each side of
  // both halves. The bin keeps its group size.
  void move_one(std::size_t from, std::size_t to) {
    auto& own = bins_[from];
    if (!own.empty()) {
      auto lightest = std::min_element(
          own.begin(), own.end(), [](const Bin& a, const Bin& b) { return a.tokens < b.tokens; });
      bins_[to].push_back(*lightest);
      own.erase(lightest);
    } else {
      move_one(2 * from, 2 * to);
      move_one(2 * from + 1, 2 * to + 1);
    }
    --count_[from];
    ++count_[to];
  }

  void equalize(std::size_t node) {
    if (is_leaf(node)) {
      count_[node] = static_cast<std::int64_t>(bins_[node].size());
      return;
    }
    const std::size_t left = 2 * node;
    const std::size_t right = left + 1;
    equalize(left);
    equalize(right);
    if (count_[left] != count_[right]) {
      const std::size_t small = count_[left] < count_[right] ? left : right;
      const std::size_t large = small == left ? right : left;
      std::int64_t gap = count_[large] - count_[small];
      const std::int64_t room = std::min(gap, growth_room(small));
      if (room > 0) grow(small, room);
      gap -= room;
      // Then give the small half new bins holding single sequences taken from multi-sequence
      // bins of the large half: one more microbatch there, the least work moved.
      const std::int64_t stealable = std::min(gap, growth_room(large));
      for (std::int64_t k = 0; k < stealable; ++k) steal_one(large, small);
      gap -= stealable;
      // What splitting cannot cover: move bins from the large half to the small one (two
      // counts per move), and lift one more bin when the rest is odd. Both always succeed:
      // every rank of `large` has at least `gap` bins.
      for (; gap >= 2; gap -= 2) move_one(large, small);
      if (gap == 1) lift_one(large, node);
    }
    count_[node] = static_cast<std::int64_t>(bins_[node].size()) + count_[left];
  }

  void emit(Schedule& schedule) {
    tiling_.assign(static_cast<std::size_t>(count_[1]), {});
    place(1, 0, pool_, 0);
    schedule = Schedule{};
    schedule.pool_size = pool_;
    schedule.ids.reserve(input_.lengths.size());
    std::vector<std::int64_t> ids;
    for (const auto& groups : tiling_) {
      schedule.begin_microbatch();
      for (const auto& placement : groups) {
        ids.clear();
        for (std::int64_t id = placement.bin->first; id >= 0;
             id = next_id_[static_cast<std::size_t>(id)]) {
          ids.push_back(id);
        }
        schedule.add_group(placement.start, placement.size, ids);
      }
      schedule.end_microbatch();
    }
  }

  // Pre-order: a block's own bins first, then its halves side by side, so the groups of one
  // microbatch are appended left to right.
  void place(std::size_t node, std::int64_t start, std::int64_t size, std::size_t first) {
    const auto& bins = bins_[node];
    for (std::size_t b = 0; b < bins.size(); ++b) {
      tiling_[first + b].push_back(Placement{start, size, &bins[b]});
    }
    if (is_leaf(node)) return;
    place(2 * node, start, size / 2, first + bins.size());
    place(2 * node + 1, start + size / 2, size / 2, first + bins.size());
  }

  struct Placement {
    std::int64_t start;
    std::int64_t size;
    const Bin* bin;
  };

  const SchedulerInput& input_;
  const CostModel& cost_;
  std::int64_t pool_;
  std::int64_t cap_;
  std::vector<std::int64_t> next_id_;
  std::vector<Item> items_;
  std::vector<std::int32_t> order_;
  std::vector<std::int32_t> scratch_;
  std::vector<std::uint8_t> side_;
  std::vector<std::vector<Bin>> bins_;
  std::vector<std::int64_t> count_;
  std::vector<std::vector<Placement>> tiling_;
};

}  // namespace

namespace {

Schedule buddy_tree_layout(const SchedulerInput& input, const CostModel& cost_model,
                           double promotion_factor, double deadline_seconds,
                           std::int64_t* promoted) {
  validate_scheduler_input(input);
  Schedule schedule;
  if (!is_power_of_two(input.pool_size())) return schedule;
  for (const auto length : input.lengths) {
    if (group_size_needed(length, input.max_seqlen_per_dp_cp_rank, input.min_group_size,
                          input.alignment) > input.pool_size()) {
      return schedule_default_dynamic_cp(input);  // raises the "needs a group of" error
    }
  }
  BuddyTree tree(input, cost_model);
  std::int64_t promoted_here = 0;
  tree.build(promotion_factor, deadline_seconds, schedule, promoted_here);
  if (promoted != nullptr) *promoted = promoted_here;
  return schedule;
}

}  // namespace

Schedule schedule_buddy_tree(const SchedulerInput& input, const CostModel& cost_model,
                             double promotion_factor, std::int64_t* promoted) {
  return buddy_tree_layout(input, cost_model, promotion_factor, 0.0, promoted);
}

Schedule schedule_cost_aware(const SchedulerInput& input, const CostModel& cost_model) {
  validate_scheduler_input(input);
  Schedule best;
  double best_seconds = std::numeric_limits<double>::infinity();
  auto consider = [&](Schedule candidate) {
    if (candidate.num_microbatches() < 1) return;
    const double seconds =
        cost_model.step_time(candidate, input.lengths, input.alignment).step_seconds;
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = std::move(candidate);
    }
  };
  // Promotion thresholds, as multiples of the mean per-rank work: 0 keeps every sequence on
  // the group it needs; the others trade rank-seconds for a shorter critical path.
  std::int64_t promoted = 0;
  consider(schedule_buddy_tree(input, cost_model, 0.5, &promoted));
  if (promoted > 0) {  // otherwise every factor gives the same layout
    for (const double factor : {0.0, 0.75, 1.0}) {
      consider(schedule_buddy_tree(input, cost_model, factor));
    }
    // Finer factors help a few percent; past ~8k samples they would cost more host time than
    // the 20 ms budget allows.
    if (input.lengths.size() <= 8192) {
      for (const double factor : {0.875, 1.25, 1.5}) {
        consider(schedule_buddy_tree(input, cost_model, factor));
      }
    }
  }
  // Deadlines from the tight lower bound: in a step of about that length, a sequence alone on
  // its group must fit, which is the promotion the bound itself assumes (long-tail batches at
  // large pools, where the mean-work multiples above promote too little).
  if (promoted > 0 && input.lengths.size() <= 8192) {  // host time, as above
    const double tight = cost_model.tight_lower_bound_seconds(
        input.lengths, input.pool_size(), input.max_seqlen_per_dp_cp_rank, input.min_group_size,
        input.alignment);
    for (const double slack : {1.0, 1.25}) {
      consider(buddy_tree_layout(input, cost_model, 0.0, slack * tight, nullptr));
    }
  }
  consider(schedule_default_dynamic_cp(input));
  const std::int64_t static_capacity =
      input.context_parallel_size * input.max_seqlen_per_dp_cp_rank;
  const bool static_fits =
      std::all_of(input.lengths.begin(), input.lengths.end(), [&](std::int64_t l) {
        return input.alignment.padded(l, input.context_parallel_size) <= static_capacity;
      });
  // The static groups must also be groups dynamic CP may use (size >= min_group_size).
  if (static_fits && input.context_parallel_size >= input.min_group_size) {
    try {
      consider(schedule_dp_balanced(input));
    } catch (const core::Error&) {
      // The static layout cannot split this batch into a multiple of dp bins; not a candidate.
    }
  }
  DYNCP_CHECK(best.num_microbatches() > 0, "no candidate schedule");
  return best;
}

}  // namespace dyncp::packing
