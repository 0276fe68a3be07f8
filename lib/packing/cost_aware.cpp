#include "packing/cost_aware.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/static_fallback.hpp"

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
    base_items_.resize(input.lengths.size());
    base_solo_.resize(input.lengths.size());
    for (std::size_t id = 0; id < input.lengths.size(); ++id) {
      Item& item = base_items_[id];
      item.id = static_cast<std::int64_t>(id);
      item.group_size =
          group_size_needed(input.lengths[id], cap_, input.min_group_size, input.alignment);
      item.length = length_on(item.id, item.group_size);
      item.rank_seconds = rank_seconds(item.length, item.group_size);
      base_solo_[id] = alone(item.id, item.group_size);
      base_total_ += item.rank_seconds;
      fits_pool_ = fits_pool_ && item.group_size <= pool_;
    }
    const std::int64_t nodes = 2 * (pool_ / input.min_group_size);
    bins_.resize(static_cast<std::size_t>(nodes));
    count_.assign(static_cast<std::size_t>(nodes), 0);
    load_.assign(static_cast<std::size_t>(nodes), 0.0);
    bucket_start_.assign(static_cast<std::size_t>(nodes) + 1, 0);
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
    return cost_.parameters().microbatch_overhead_seconds +
           cost_.communication_seconds(0, size, /*sequences=*/0);
  }

  double rank_seconds(std::int64_t length, std::int64_t size) const {
    const double per_rank =
        cost_.compute_seconds(length, size) + cost_.transfer_seconds(length, size);
    // Amortised fixed cost: the sequence fills length / (size * cap) of a bin.
    return static_cast<double>(size) * per_rank +
           bin_overhead(size) * static_cast<double>(length) / static_cast<double>(cap_);
  }

  // False when some sequence needs more ranks than the pool has.
  bool fits_pool() const { return fits_pool_; }

  // Seconds of sample `id` alone on a group of `size`.
  double alone(std::int64_t id, std::int64_t size) const {
    const std::int64_t length = length_on(id, size);
    return cost_.compute_seconds(length, size) + cost_.communication_seconds(length, size);
  }

  // A sequence whose time alone on its group exceeds the threshold moves to twice the group
  // while that makes it faster. The threshold is `deadline_seconds` when positive, else
  // promotion_factor x (mean per-rank work) (promotion_factor 0: never). Returns false, and
  // leaves `schedule` alone, when `skip_repeat` is set and every sequence got the same group
  // as in the previous build (the layout would be the same).
  bool build(double promotion_factor, double deadline_seconds, bool skip_repeat, Schedule& schedule,
             std::int64_t& promoted) {
    promoted = 0;
    items_ = base_items_;
    if (promotion_factor > 0.0 || deadline_seconds > 0.0) {
      const double threshold = deadline_seconds > 0.0
                                   ? deadline_seconds
                                   : promotion_factor * base_total_ / static_cast<double>(pool_);
      for (auto& item : items_) {
        if (base_solo_[static_cast<std::size_t>(item.id)] <= threshold) continue;
        double solo = base_solo_[static_cast<std::size_t>(item.id)];
        while (item.group_size < pool_ && solo > threshold) {
          const double doubled = alone(item.id, 2 * item.group_size);
          if (!(doubled < solo)) break;
          item.group_size *= 2;
          solo = doubled;
        }
        if (item.group_size != base_items_[static_cast<std::size_t>(item.id)].group_size) {
          ++promoted;
          item.length = length_on(item.id, item.group_size);
          item.rank_seconds = rank_seconds(item.length, item.group_size);
        }
      }
    }
    if (skip_repeat && built_once_) {
      bool same = true;
      for (std::size_t i = 0; i < items_.size() && same; ++i)
        same = items_[i].group_size == last_sizes_[i];
      if (same) return false;
    }
    built_once_ = true;
    last_sizes_.resize(items_.size());
    for (std::size_t i = 0; i < items_.size(); ++i) last_sizes_[i] = items_[i].group_size;
    // Largest rank-seconds first, ties in id order (a stable sort on a contiguous key).
    keyed_.resize(items_.size());
    for (std::size_t i = 0; i < items_.size(); ++i)
      keyed_[i] = {items_[i].rank_seconds, static_cast<std::int32_t>(i)};
    std::sort(keyed_.begin(), keyed_.end(), [](const Keyed& a, const Keyed& b) {
      return a.key > b.key || (a.key == b.key && a.index < b.index);
    });
    order_.resize(items_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = keyed_[i].index;
    scratch_.resize(order_.size());
    node_of_.resize(order_.size());
    for (auto& bins : bins_) bins.clear();
    std::fill(count_.begin(), count_.end(), 0);
    assign();
    equalize(1);
    emit(schedule);
    return true;
  }

 private:
  bool is_leaf(std::size_t node) const { return 2 * node >= bins_.size(); }
  const Item& item_at(std::size_t position) const {
    return items_[static_cast<std::size_t>(order_[position])];
  }

  // LPT down the tree, largest rank-seconds first: a sequence whose group is smaller than the
  // block it is in goes to the lighter half (the left one on ties), until it reaches a block of
  // its own group size. Each block's own sequences are then packed in that same order. (One
  // descent per sequence is the same as an LPT pass over every block's sequences in turn: the
  // sequences reaching a block arrive there in the global order, and each half's load is the
  // sum of what went into it.)
  void assign() {
    std::fill(load_.begin(), load_.end(), 0.0);
    std::fill(bucket_start_.begin(), bucket_start_.end(), 0);
    for (std::size_t p = 0; p < order_.size(); ++p) {
      const Item& item = item_at(p);
      std::size_t node = 1;
      for (std::int64_t size = pool_; size > item.group_size && !is_leaf(node); size /= 2) {
        node = load_[2 * node] <= load_[2 * node + 1] ? 2 * node : 2 * node + 1;
        load_[node] += item.rank_seconds;
      }
      node_of_[p] = static_cast<std::int32_t>(node);
      ++bucket_start_[node + 1];
    }
    // Stable counting sort of order_ by block, so each block's sequences are one range.
    for (std::size_t node = 1; node + 1 < bucket_start_.size(); ++node)
      bucket_start_[node + 1] += bucket_start_[node];
    cursor_.assign(bucket_start_.begin(), bucket_start_.end() - 1);
    for (std::size_t p = 0; p < order_.size(); ++p)
      scratch_[static_cast<std::size_t>(cursor_[static_cast<std::size_t>(node_of_[p])]++)] =
          order_[p];
    order_.swap(scratch_);
    for (std::size_t node = 1; node < bins_.size(); ++node) {
      const auto lo = static_cast<std::size_t>(bucket_start_[node]);
      const auto hi = static_cast<std::size_t>(bucket_start_[node + 1]);
      if (lo < hi) pack_first_fit_decreasing(node, node_size(node), lo, hi);
    }
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
    const std::size_t first_new = bins_[target].size();
    bins_[target].emplace_back();
    lift_into(node, target, first_new);
  }

  // Moves one bin off every rank path of `node` into the bins of `target` from `first_new` on
  // (first-fit, a new one only when none has room), and lowers the counts on the way.
  void lift_into(std::size_t node, std::size_t target, std::size_t first_new) {
    auto& own = bins_[node];
    if (!own.empty()) {
      const Bin lifted = own.back();
      own.pop_back();
      const std::int64_t size = node_size(target);
      auto& bins = bins_[target];
      for (std::int64_t id = lifted.first; id >= 0;) {
        const std::int64_t next = next_id_[static_cast<std::size_t>(id)];
        const std::int64_t length = length_on(id, size);
        std::size_t b = first_new;
        while (b < bins.size() && bins[b].count > 0 && bins[b].tokens + length > size * cap_) ++b;
        if (b == bins.size()) bins.emplace_back();
        append(bins[b], id, length);
        id = next;
      }
    } else {
      lift_into(2 * node, target, first_new);
      lift_into(2 * node + 1, target, first_new);
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

  // The shortest sequence of any multi-sequence bin below `from` (taking it changes no count
  // there) becomes a bin of its own on the whole block `to`: one more microbatch on every
  // rank of `to` for the least work. False when `from` has no such bin.
  bool donate_one(std::size_t from, std::size_t to) {
    const std::int64_t to_size = node_size(to);
    std::size_t best_node = 0;
    std::size_t best_bin = 0;
    std::int64_t best_length = std::numeric_limits<std::int64_t>::max();
    for (std::size_t first = from, last = from; first < bins_.size();
         first *= 2, last = 2 * last + 1) {
      for (std::size_t n = first; n <= last; ++n) {
        for (std::size_t b = 0; b < bins_[n].size(); ++b) {
          const Bin& bin = bins_[n][b];
          if (bin.count < 2) continue;
          const std::int64_t length = input_.lengths[static_cast<std::size_t>(bin.last)];
          if (length < best_length) {
            best_length = length;
            best_node = n;
            best_bin = b;
          }
        }
      }
    }
    if (best_node == 0 || length_on(bins_[best_node][best_bin].last, to_size) > to_size * cap_)
      return false;
    const std::int64_t moved = pop_last(bins_[best_node][best_bin], best_node);
    Bin single;
    append(single, moved, length_on(moved, to_size));
    bins_[to].push_back(single);
    ++count_[to];
    return true;
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
      while (gap > 0 && donate_one(large, small)) --gap;
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
  struct Keyed {
    double key;
    std::int32_t index;
  };
  std::vector<Item> base_items_;   // every sequence on the group it needs
  std::vector<double> base_solo_;  // its time alone there
  double base_total_ = 0.0;
  bool fits_pool_ = true;
  bool built_once_ = false;
  std::vector<std::int64_t> last_sizes_;
  std::vector<Keyed> keyed_;
  std::vector<Item> items_;
  std::vector<std::int32_t> order_;
  std::vector<std::int32_t> scratch_;
  std::vector<std::int32_t> node_of_;       // block of order_[p]
  std::vector<double> load_;                // rank-seconds sent into each block so far
  std::vector<std::int64_t> bucket_start_;  // order_ range of each block's own sequences
  std::vector<std::int64_t> cursor_;
  std::vector<std::vector<Bin>> bins_;
  std::vector<std::int64_t> count_;
  std::vector<std::vector<Placement>> tiling_;
};

}  // namespace

namespace {

// Raises default_dynamic_cp's error for a sequence that needs more ranks than the pool has.
void require_fits_pool(const BuddyTree& tree, const SchedulerInput& input) {
  if (!tree.fits_pool()) schedule_default_dynamic_cp(input);
}

}  // namespace

Schedule schedule_buddy_tree(const SchedulerInput& input, const CostModel& cost_model,
                             double promotion_factor, std::int64_t* promoted) {
  validate_scheduler_input(input);
  Schedule schedule;
  if (!is_power_of_two(input.pool_size())) return schedule;
  BuddyTree tree(input, cost_model);
  require_fits_pool(tree, input);
  std::int64_t promoted_here = 0;
  tree.build(promotion_factor, 0.0, false, schedule, promoted_here);
  if (promoted != nullptr) *promoted = promoted_here;
  return schedule;
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
  const bool small_batch = input.lengths.size() <= kCostAwareFullSearchSamples;
  if (is_power_of_two(input.pool_size())) {
    BuddyTree tree(input, cost_model);
    require_fits_pool(tree, input);
    Schedule candidate;
    std::int64_t promoted = 0;
    auto try_layout = [&](double factor, double deadline) {
      std::int64_t unused = 0;
      if (tree.build(factor, deadline, true, candidate, unused)) consider(std::move(candidate));
    };
    // Promotion thresholds, as multiples of the mean per-rank work: 0 keeps every sequence on
    // the group it needs; the others trade rank-seconds for a shorter critical path.
    tree.build(0.5, 0.0, false, candidate, promoted);
    consider(std::move(candidate));
    if (promoted > 0) {  // otherwise every factor gives the same layout
      for (const double factor : {0.0, 0.75, 1.0}) try_layout(factor, 0.0);
      // Finer factors help a few percent, at more host time than large batches can spend.
      if (small_batch) {
        for (const double factor : {0.875, 1.25, 1.5}) try_layout(factor, 0.0);
      }
    }
    // Deadlines from the tight lower bound: in a step of about that length, a sequence alone
    // on its group must fit, which is the promotion the bound itself assumes (long-tail
    // batches at large pools, where the mean-work multiples above promote too little).
    // Several slacks, because at the bound's deadline the pool has no room left for the
    // imbalance of a real layout; layouts that repeat an earlier one are not rebuilt.
    if (promoted > 0 && small_batch) {
      const double tight = cost_model.tight_lower_bound_seconds(
          input.lengths, input.pool_size(), input.max_seqlen_per_dp_cp_rank, input.min_group_size,
          input.alignment);
      for (const double slack : {1.0, 1.05, 1.1, 1.2, 1.25, 1.35, 1.5}) {
        try_layout(0.0, slack * tight);
      }
    }
  }
  // Megatron's greedy (and the only dynamic layout for a pool that is not a power of two).
  if (small_batch || !is_power_of_two(input.pool_size())) {
    consider(schedule_default_dynamic_cp(input));
  }
  if (auto fixed = static_layout_candidate(input)) consider(std::move(*fixed));
  DYNCP_CHECK(best.num_microbatches() > 0, "no candidate schedule");
  return best;
}

}  // namespace dyncp::packing
