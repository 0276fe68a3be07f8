#include "packing/cost_aware.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/static_fallback.hpp"

namespace dyncp::packing {
namespace {

using Split = BuddyTreeSplit;

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
    levels_ = depth(static_cast<std::size_t>(nodes) - 1) + 1;
    own_.assign(static_cast<std::size_t>(nodes), 0.0);
    path_.assign(static_cast<std::size_t>(nodes) * static_cast<std::size_t>(levels_), 0.0);
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
  // as in the previous promotion (the layouts would be the same). Then layout() builds a
  // schedule from these groups with either split.
  bool promote(double promotion_factor, double deadline_seconds, bool skip_repeat,
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
    // Largest rank-seconds first, ties in id order: the base order, sorted once, merged with
    // the (few) promoted sequences sorted by their new keys.
    if (base_keyed_.empty()) {
      base_keyed_.resize(base_items_.size());
      for (std::size_t i = 0; i < base_items_.size(); ++i)
        base_keyed_[i] = {base_items_[i].rank_seconds, static_cast<std::int32_t>(i)};
      sort_keyed(base_keyed_);
    }
    moved_.clear();
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (items_[i].group_size != base_items_[i].group_size)
        moved_.push_back({items_[i].rank_seconds, static_cast<std::int32_t>(i)});
    }
    std::sort(moved_.begin(), moved_.end(), before);
    keyed_.clear();
    std::size_t next_moved = 0;
    for (const Keyed& k : base_keyed_) {
      const auto i = static_cast<std::size_t>(k.index);
      if (items_[i].group_size != base_items_[i].group_size) continue;
      while (next_moved < moved_.size() && before(moved_[next_moved], k))
        keyed_.push_back(moved_[next_moved++]);
      keyed_.push_back(k);
    }
    keyed_.insert(keyed_.end(), moved_.begin() + static_cast<std::ptrdiff_t>(next_moved),
                  moved_.end());
    // The layouts read the sequences in this order (and, per block, in increasing position):
    // a copy in that order keeps those reads sequential.
    ordered_.resize(keyed_.size());
    for (std::size_t i = 0; i < keyed_.size(); ++i)
      ordered_[i] = items_[static_cast<std::size_t>(keyed_[i].index)];
    return true;
  }

  // The buddy-tree schedule of the last promotion, its blocks chosen by `split`.
  void layout(Split split, Schedule& schedule) {
    order_.resize(items_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<std::int32_t>(i);
    scratch_.resize(order_.size());
    node_of_.resize(order_.size());
    for (auto& bins : bins_) bins.clear();
    std::fill(count_.begin(), count_.end(), 0);
    assign(split);
    equalize(1);
    emit(schedule);
  }

 private:
  bool is_leaf(std::size_t node) const { return 2 * node >= bins_.size(); }
  const Item& item_at(std::size_t position) const {
    return ordered_[static_cast<std::size_t>(order_[position])];
  }

  static int depth(std::size_t node) { return std::bit_width(node) - 1; }
  // path_[node * levels_ + l], for the blocks at depth l inside `node` (l >= depth(node)): the
  // least, over those blocks, of their busiest path from `node` down (own work of `node` and
  // of the blocks between it and the leaves). At l = depth(node) it is node's own busiest path.
  double& path_at(std::size_t node, int level) {
    return path_[node * static_cast<std::size_t>(levels_) + static_cast<std::size_t>(level)];
  }
  void refresh_paths(std::size_t node) {
    const int d = depth(node);
    if (is_leaf(node)) {
      path_at(node, d) = own_[node];
      return;
    }
    path_at(node, d) =
        own_[node] + std::max(path_at(2 * node, d + 1), path_at(2 * node + 1, d + 1));
    for (int l = d + 1; l < levels_; ++l)
      path_at(node, l) = own_[node] + std::min(path_at(2 * node, l), path_at(2 * node + 1, l));
  }

  // Which block of its group size each sequence (largest rank-seconds first) goes to:
  //   rank_seconds: LPT down the tree, to the half with fewer rank-seconds so far (the left one
  //     on ties), until a block of its size. One descent per sequence is an LPT pass over every
  //     block's sequences in turn: those reaching a block arrive in the global order.
  //   critical_path: list scheduling on what the step time is (see emit): to the block whose
  //     busiest rank path (own work of the block, of every block above it and of the busiest
  //     chain below it) is the least so far, the left one on ties. The halves of a small block
  //     no longer inherit a total fixed before they were filled, which at 1,024 ranks with four
  //     sequences per rank left them up to a whole sequence apart (about 6% of the step); but
  //     the microbatch counts it leaves can cost more to equalise, so both are candidates.
  // Each block's own sequences are then packed in that same order.
  void assign(Split split) {
    std::fill(bucket_start_.begin(), bucket_start_.end(), 0);
    std::fill(own_.begin(), own_.end(), 0.0);
    std::fill(path_.begin(), path_.end(), 0.0);
    for (std::size_t p = 0; p < order_.size(); ++p) {
      const Item& item = item_at(p);
      int target = 0;  // depth of the blocks of the item's group size
      for (std::int64_t size = pool_; size > item.group_size && target + 1 < levels_; size /= 2)
        ++target;
      std::size_t node = 1;
      if (split == Split::rank_seconds) {
        for (int d = 0; d < target; ++d) {
          node = own_[2 * node] <= own_[2 * node + 1] ? 2 * node : 2 * node + 1;
          own_[node] += item.rank_seconds;  // here: rank-seconds sent into the block
        }
      } else {
        for (int d = 0; d < target; ++d) {
          node =
              path_at(2 * node, target) <= path_at(2 * node + 1, target) ? 2 * node : 2 * node + 1;
        }
        own_[node] += item.rank_seconds / static_cast<double>(node_size(node));
        for (std::size_t up = node; up >= 1; up /= 2) refresh_paths(up);
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
  static bool before(const Keyed& a, const Keyed& b) {
    return a.key > b.key || (a.key == b.key && a.index < b.index);
  }
  // In `before` order. Large batches: a stable LSD radix sort on the key's bits (positive
  // doubles order as their bit patterns), from id order, a third of std::sort's instructions
  // at 30,720 sequences (the largest single cost of the buddy tree there).
  void sort_keyed(std::vector<Keyed>& keyed) {
    if (keyed.size() < 2048) {
      std::sort(keyed.begin(), keyed.end(), before);
      return;
    }
    constexpr int kBits = 11;
    constexpr std::size_t kBuckets = std::size_t{1} << kBits;
    auto digit = [](const Keyed& k, int shift) {
      return static_cast<std::size_t>((~std::bit_cast<std::uint64_t>(k.key) >> shift) &
                                      (kBuckets - 1));
    };
    radix_scratch_.resize(keyed.size());
    std::vector<std::size_t> counts(kBuckets);
    for (int shift = 0; shift < 64; shift += kBits) {
      std::fill(counts.begin(), counts.end(), 0);
      for (const Keyed& k : keyed) ++counts[digit(k, shift)];
      std::size_t sum = 0;
      for (auto& c : counts) sum += std::exchange(c, sum);
      for (const Keyed& k : keyed) radix_scratch_[counts[digit(k, shift)]++] = k;
      keyed.swap(radix_scratch_);
    }
  }
  std::vector<Item> base_items_;   // every sequence on the group it needs
  std::vector<double> base_solo_;  // its time alone there
  double base_total_ = 0.0;
  bool fits_pool_ = true;
  bool built_once_ = false;
  std::vector<std::int64_t> last_sizes_;
  std::vector<Keyed> base_keyed_;  // every sequence on the group it needs, in build order
  std::vector<Keyed> moved_;       // the promoted ones
  std::vector<Keyed> radix_scratch_;
  std::vector<Keyed> keyed_;
  std::vector<Item> items_;
  std::vector<Item> ordered_;        // items_ by decreasing rank-seconds
  std::vector<std::int32_t> order_;  // positions in ordered_
  std::vector<std::int32_t> scratch_;
  std::vector<std::int32_t> node_of_;  // block of order_[p]
  int levels_ = 1;                     // depths of the tree: the leaves are at levels_ - 1
  // critical_path: per-rank seconds of each block's own sequences so far; rank_seconds: the
  // rank-seconds of every sequence sent into the block.
  std::vector<double> own_;
  std::vector<double> path_;                // see path_at
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
                             double promotion_factor, std::int64_t* promoted,
                             BuddyTreeSplit split) {
  validate_scheduler_input(input);
  Schedule schedule;
  if (!is_power_of_two(input.pool_size())) return schedule;
  BuddyTree tree(input, cost_model);
  require_fits_pool(tree, input);
  std::int64_t promoted_here = 0;
  tree.promote(promotion_factor, 0.0, false, promoted_here);
  tree.layout(split, schedule);
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
    // Both splits on batches of full search; above that the critical-path split alone (it was
    // never beaten by the other on the large batches measured, and the second layout costs
    // host time there).
    auto layouts = [&] {
      tree.layout(Split::critical_path, candidate);
      consider(std::move(candidate));
      if (!small_batch) return;
      tree.layout(Split::rank_seconds, candidate);
      consider(std::move(candidate));
    };
    auto try_layout = [&](double factor, double deadline) {
      std::int64_t unused = 0;
      if (tree.promote(factor, deadline, true, unused)) layouts();
    };
    // Promotion thresholds, as multiples of the mean per-rank work: 0 keeps every sequence on
    // the group it needs; the others trade rank-seconds for a shorter critical path.
    tree.promote(0.5, 0.0, false, promoted);
    layouts();
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
  // Megatron's greedy (the only dynamic layout for a pool that is not a power of two) and the
  // static layout: default_dynamic_cp as dyncp-train runs it is one of the two, so cost_aware
  // never models a longer step than it, nor (cp >= min group size) than static CP, on any batch.
  consider(schedule_default_dynamic_cp(input));
  if (auto fixed = static_layout_candidate(input)) consider(std::move(*fixed));
  DYNCP_CHECK(best.num_microbatches() > 0, "no candidate schedule");
  return best;
}

}  // namespace dyncp::packing
