#pragma once
// The groups of one size in one microbatch, in creation order, as a segment tree over
// (tokens, load) so that a scheduler can ask, in O(log n) typical time:
//   first_with_room_and_load(max_tokens, w, ceiling): the first slot with tokens <= max_tokens
//       and load + w <= ceiling;
//   least_load_with_room(max_tokens): the slot of least load among tokens <= max_tokens, the
//       first one on ties.
// Both descend only into subtrees that can hold an answer; the bounds are exact (min tokens,
// max tokens, min load per node), so answers equal a left-to-right scan's.

#include <cstdint>
#include <limits>
#include <vector>

namespace dyncp::packing {

class GroupLoadTree {
 public:
  static constexpr std::int64_t none = -1;

  // Room for `max_slots` groups; keeps its memory across clear().
  void reserve(std::int64_t max_slots) {
    leaves_ = 1;
    while (leaves_ < max_slots) leaves_ *= 2;
    min_tokens_.assign(2 * static_cast<std::size_t>(leaves_), kNoTokens);
    max_tokens_.assign(2 * static_cast<std::size_t>(leaves_), -1);
    min_load_.assign(2 * static_cast<std::size_t>(leaves_), kNoLoad);
    argmin_.assign(2 * static_cast<std::size_t>(leaves_), none);
    count_ = 0;
  }

  std::int64_t size() const { return count_; }
  std::int64_t min_tokens() const { return count_ == 0 ? kNoTokens : min_tokens_[1]; }

  std::int64_t push(std::int64_t tokens, double load) {
    const std::int64_t slot = count_++;
    set(slot, tokens, load);
    return slot;
  }

  void set(std::int64_t slot, std::int64_t tokens, double load) {
    std::size_t node = static_cast<std::size_t>(leaves_ + slot);
    min_tokens_[node] = tokens;
    max_tokens_[node] = tokens;
    min_load_[node] = load;
    argmin_[node] = slot;
    for (node /= 2; node >= 1; node /= 2) pull(node);
  }

  // Forget every slot; cost proportional to the slots used since the last clear.
  void clear() {
    if (count_ == 0) return;
    std::size_t lo = static_cast<std::size_t>(leaves_);
    std::size_t hi = lo + static_cast<std::size_t>(count_) - 1;
    for (std::size_t node = lo; node <= hi; ++node) {
      min_tokens_[node] = kNoTokens;
      max_tokens_[node] = -1;
      min_load_[node] = kNoLoad;
      argmin_[node] = none;
    }
    while (lo > 1) {
      lo /= 2;
      hi /= 2;
      for (std::size_t node = lo; node <= hi; ++node) pull(node);
    }
    count_ = 0;
  }

  std::int64_t first_with_room_and_load(std::int64_t max_tokens, double w, double ceiling) const {
    if (count_ == 0) return none;
    return first_with_room_and_load(1, max_tokens, w, ceiling);
  }

  std::int64_t least_load_with_room(std::int64_t max_tokens) const {
    if (count_ == 0) return none;
    std::int64_t best = none;
    double best_load = kNoLoad;
    least_load_with_room(1, max_tokens, best, best_load);
    return best;
  }

 private:
  static constexpr std::int64_t kNoTokens = std::numeric_limits<std::int64_t>::max();
  static constexpr double kNoLoad = std::numeric_limits<double>::infinity();

  void pull(std::size_t node) {
    const std::size_t left = 2 * node;
    const std::size_t right = left + 1;
    min_tokens_[node] = std::min(min_tokens_[left], min_tokens_[right]);
    max_tokens_[node] = std::max(max_tokens_[left], max_tokens_[right]);
    // Leftmost minimum: the right child wins only when strictly smaller.
    if (min_load_[right] < min_load_[left]) {
      min_load_[node] = min_load_[right];
      argmin_[node] = argmin_[right];
    } else {
      min_load_[node] = min_load_[left];
      argmin_[node] = argmin_[left];
    }
  }

  std::int64_t first_with_room_and_load(std::size_t node, std::int64_t max_tokens, double w,
                                        double ceiling) const {
    if (min_tokens_[node] > max_tokens || !(min_load_[node] + w <= ceiling)) return none;
    if (node >= static_cast<std::size_t>(leaves_)) {
      return static_cast<std::int64_t>(node) - leaves_;
    }
    const std::int64_t left = first_with_room_and_load(2 * node, max_tokens, w, ceiling);
    if (left != none) return left;
    return first_with_room_and_load(2 * node + 1, max_tokens, w, ceiling);
  }

  // Visits subtrees left to right and replaces the best only on a strictly smaller load, so
  // ties resolve to the leftmost slot.
  void least_load_with_room(std::size_t node, std::int64_t max_tokens, std::int64_t& best,
                            double& best_load) const {
    if (min_tokens_[node] > max_tokens || !(min_load_[node] < best_load)) return;
    if (max_tokens_[node] <= max_tokens) {  // every used slot below fits
      best = argmin_[node];
      best_load = min_load_[node];
      return;
    }
    least_load_with_room(2 * node, max_tokens, best, best_load);
    least_load_with_room(2 * node + 1, max_tokens, best, best_load);
  }

  std::int64_t leaves_ = 1;
  std::int64_t count_ = 0;
  std::vector<std::int64_t> min_tokens_;
  std::vector<std::int64_t> max_tokens_;
  std::vector<double> min_load_;
  std::vector<std::int64_t> argmin_;
};

}  // namespace dyncp::packing
