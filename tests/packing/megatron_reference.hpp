#pragma once
// Test oracle: the dynamic-CP algorithm of docs/packing.md written the slow, literal way —
// per-rank lists and loads, every candidate scored by a scan over all ranks — so the fast
// library implementation can be compared against it id for id on random inputs.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "packing/schedule.hpp"

namespace dyncp::packing::testing {

using RankLists = std::vector<std::vector<std::vector<std::int64_t>>>;

class ReferenceDynamicCp {
 public:
  ReferenceDynamicCp(std::vector<std::int64_t> lengths, std::int64_t pool, std::int64_t cap,
                     std::int64_t min_cp)
      : lengths_(std::move(lengths)), pool_(pool), cap_(cap), min_cp_(min_cp) {}

  RankLists run() {
    std::vector<std::int64_t> sorted(lengths_.size());
    std::iota(sorted.begin(), sorted.end(), std::int64_t{0});
    std::stable_sort(sorted.begin(), sorted.end(), [&](auto a, auto b) { return len(a) > len(b); });
    RankLists result;
    while (!sorted.empty()) result.push_back(microbatch(sorted));
    return result;
  }

 private:
  struct Group {
    std::vector<std::int64_t> members;
    std::int64_t size;
    double fill;
  };

  std::int64_t len(std::int64_t id) const { return lengths_[static_cast<std::size_t>(id)]; }
  std::int64_t needed(std::int64_t length) const {
    return group_size_needed(length, cap_, min_cp_);
  }
  static double work(std::int64_t length, std::int64_t c) {
    return static_cast<double>(length * length) / static_cast<double>(c);
  }

  // Forms one microbatch from `sorted`, which it replaces by the leftover.
  std::vector<std::vector<std::int64_t>> microbatch(std::vector<std::int64_t>& sorted) {
    const auto P = static_cast<std::size_t>(pool_);
    ids_.assign(P, {});
    load_.assign(P, 0.0);
    group_of_.assign(P, -1);
    groups_.clear();
    const std::int64_t tall = len(sorted[0]);
    const double limit = static_cast<double>(tall) * static_cast<double>(cap_) * 1.05;
    {
      Group g{{}, needed(tall), static_cast<double>(tall) / static_cast<double>(needed(tall))};
      for (std::int64_t r = 0; r < g.size; ++r) g.members.push_back(r);
      for (auto r : g.members) assign(r, 0, sorted[0], work(tall, g.size));
      groups_.push_back(g);
    }
    std::vector<std::int64_t> leftover;
    for (std::size_t i = 1; i < sorted.size(); ++i) {
      const std::int64_t id = sorted[i];
      const std::int64_t L = len(id);
      bool found = false;
      double best_pm = 0;
      std::int64_t best_c = 0, best_group = -1;
      std::vector<std::int64_t> best_members;
      for (std::int64_t c = needed(L); c <= pool_; c *= 2) {
        const double w = work(L, c);
        for (std::size_t g = 0; g < groups_.size(); ++g) {
          if (groups_[g].size != c) continue;
          if (groups_[g].fill + static_cast<double>(L) / static_cast<double>(c) >
              static_cast<double>(cap_))
            continue;
          const double pm = projected(groups_[g].members, w);
          if (pm <= limit && (!found || pm < best_pm)) {
            found = true, best_pm = pm, best_c = c, best_group = static_cast<std::int64_t>(g);
          }
        }
        std::vector<std::int64_t> free;
        for (std::int64_t r = 0; r < pool_; ++r)
          if (group_of_[static_cast<std::size_t>(r)] < 0) free.push_back(r);
        if (static_cast<std::int64_t>(free.size()) >= c) {
          std::stable_sort(free.begin(), free.end(), [&](auto a, auto b) {
            return load_[static_cast<std::size_t>(a)] < load_[static_cast<std::size_t>(b)];
          });
          free.resize(static_cast<std::size_t>(c));
          const double pm = projected(free, w);
          if (pm <= limit && (!found || pm < best_pm)) {
            found = true, best_pm = pm, best_c = c, best_group = -1, best_members = free;
          }
        }
      }
      if (!found) {
        leftover.push_back(id);
        continue;
      }
      const double w = work(L, best_c);
      if (best_group < 0) {
        groups_.push_back(Group{best_members, best_c, 0.0});
        best_group = static_cast<std::int64_t>(groups_.size()) - 1;
      }
      Group& g = groups_[static_cast<std::size_t>(best_group)];
      g.fill += static_cast<double>(L) / static_cast<double>(best_c);
      for (auto r : g.members) assign(r, best_group, id, w);
    }
    bool fallback = false;
    while (std::any_of(ids_.begin(), ids_.end(), [](auto& v) { return v.empty(); })) {
      if (!expand()) {
        fallback = true;
        break;
      }
    }
    if (fallback) {
      std::vector<std::int64_t> selected;
      leftover.clear();
      double packed = 0.0;
      for (auto id : sorted) {
        const double share = static_cast<double>(len(id)) / static_cast<double>(pool_);
        if (packed + share <= static_cast<double>(cap_)) {
          selected.push_back(id);
          packed += share;
        } else {
          leftover.push_back(id);
        }
      }
      ids_.assign(P, selected);
    }
    sorted = leftover;
    return ids_;
  }

  void assign(std::int64_t rank, std::int64_t group, std::int64_t id, double w) {
    const auto r = static_cast<std::size_t>(rank);
    group_of_[r] = group;
    ids_[r].push_back(id);
    load_[r] += w;
  }

  double projected(const std::vector<std::int64_t>& members, double w) const {
    double pm = 0.0;
    for (std::int64_t r = 0; r < pool_; ++r) {
      const bool member = std::find(members.begin(), members.end(), r) != members.end();
      pm = std::max(pm, load_[static_cast<std::size_t>(r)] + (member ? w : 0.0));
    }
    return pm;
  }

  bool expand() {
    std::int64_t empty = 0;
    while (!ids_[static_cast<std::size_t>(empty)].empty()) ++empty;
    std::int64_t smallest = pool_;
    for (const auto& g : groups_) smallest = std::min(smallest, g.size);
    const std::int64_t target = std::min(2 * smallest, pool_);
    const std::int64_t extra = target - smallest;
    for (auto& g : groups_) {
      if (g.size != smallest) continue;
      const std::int64_t a = g.members.front(), b = g.members.back();
      if (b + 1 > empty || b + extra >= pool_) continue;
      if (empty - 1 + extra >= pool_) continue;
      std::vector<std::vector<std::int64_t>> new_ids(static_cast<std::size_t>(pool_));
      std::vector<double> new_load(static_cast<std::size_t>(pool_), 0.0);
      for (std::int64_t r = 0; r < a; ++r) {
        new_ids[static_cast<std::size_t>(r)] = ids_[static_cast<std::size_t>(r)];
        new_load[static_cast<std::size_t>(r)] = load_[static_cast<std::size_t>(r)];
      }
      for (std::int64_t r = a; r <= b + extra; ++r) {
        new_ids[static_cast<std::size_t>(r)] = ids_[static_cast<std::size_t>(b)];
        double sum = 0.0;
        for (auto id : ids_[static_cast<std::size_t>(b)]) sum += work(len(id), target);
        new_load[static_cast<std::size_t>(r)] = sum;
      }
      for (std::int64_t r = b + 1; r < empty; ++r) {
        new_ids[static_cast<std::size_t>(r + extra)] = ids_[static_cast<std::size_t>(r)];
        new_load[static_cast<std::size_t>(r + extra)] = load_[static_cast<std::size_t>(r)];
      }
      for (auto& other : groups_) {
        if (&other != &g && other.members.front() > b)
          for (auto& r : other.members) r += extra;
      }
      g.size = target;
      g.members.clear();
      for (std::int64_t r = a; r <= b + extra; ++r) g.members.push_back(r);
      ids_ = new_ids;
      load_ = new_load;
      return true;
    }
    return false;
  }

  std::vector<std::int64_t> lengths_;
  std::int64_t pool_, cap_, min_cp_;
  std::vector<std::vector<std::int64_t>> ids_;
  std::vector<double> load_;
  std::vector<std::int64_t> group_of_;
  std::vector<Group> groups_;
};

}  // namespace dyncp::packing::testing
