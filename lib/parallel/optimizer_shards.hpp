#pragma once
// How the distributed optimizer (ddp.use_distributed_optimizer) divides optimizer state:
// dense state over the pool, expert state over the expert-data-parallel group.
//
// For each kind (dense, expert) this rank's ranges of that kind, in offset order, form one
// logical vector of `total` elements. Every rank of the kind's group holds the same ranges
// (dense: every pool rank; experts: the ranks with the same EP index), hence the same vector.
// It is cut into `shards` contiguous pieces whose sizes differ by at most one (the first
// total % shards pieces are one longer); group rank i owns piece i. With more shards than
// elements the last pieces are empty; a kind without ranges has only empty pieces.
//
// Collectives move pieces padded to the largest, ceil(total / shards) elements, so every
// rank passes the same count (parallel::ShardedStateSync).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "parallel/parameter_partition.hpp"

namespace dyncp::parallel {

// [begin, end) in a kind's logical vector.
struct ShardPiece {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t count() const { return end - begin; }
};

ShardPiece shard_piece(std::int64_t total, int shards, int index);
// ceil(total / shards): the size every piece is padded to in a collective.
std::int64_t largest_shard_piece(std::int64_t total, int shards);

// One kind's ranges, their place in the logical vector and this rank's piece of it.
class KindShards {
 public:
  KindShards() = default;
  KindShards(std::vector<ParameterRange> ranges, int shards, int index);

  int shards() const { return shards_; }
  int index() const { return index_; }
  std::int64_t total() const { return starts_.back(); }
  ShardPiece piece(int shard) const { return shard_piece(total(), shards_, shard); }
  ShardPiece owned() const { return piece(index_); }
  std::int64_t largest_piece() const { return largest_shard_piece(total(), shards_); }

  // fn(range, flat_offset, logical_offset, count) for each run of logical [begin, end) that
  // is contiguous in the flat buffer, in order.
  template <typename Fn>
  void for_each_segment(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    if (begin >= end) return;
    // The range holding `begin`: the last whose logical start is <= begin.
    auto at = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end() - 1, begin) -
                                       starts_.begin() - 1);
    for (std::int64_t logical = begin; logical < end; ++at) {
      const ParameterRange& range = ranges_[at];
      const std::int64_t inside = logical - starts_[at];
      const std::int64_t count = std::min(range.count - inside, end - logical);
      fn(range, range.offset + inside, logical, count);
      logical += count;
    }
  }
  // The shard whose piece holds logical position `logical` (0 <= logical < total()).
  int owner_of(std::int64_t logical) const;
  // fn(flat_offset, count, owner) for each run of the flat span [offset, offset + count) that
  // lies in one shard's piece, in order. The span lies in this kind's ranges and is contiguous
  // in the flat buffer (adjacent ranges are adjacent in the logical vector too), as the
  // overlapped reductions' bucket spans are (parallel/overlapped_gradient_reduce.hpp).
  template <typename Fn>
  void for_each_owner_run(std::int64_t offset, std::int64_t count, Fn&& fn) const {
    std::int64_t logical = logical_of(offset);
    for (const std::int64_t end = offset + count; offset < end;) {
      const int owner = owner_of(logical);
      const std::int64_t run = std::min(piece(owner).end - logical, end - offset);
      fn(offset, run, owner);
      offset += run;
      logical += run;
    }
  }
  // Logical [begin, end) of a flat buffer into `out` (end - begin elements), and back. Both
  // buffers on `device` (cuda: one device copy per segment).
  void read(const float* flat, std::int64_t begin, std::int64_t end, float* out,
            core::Device device = core::Device::cpu) const;
  void write(const float* in, std::int64_t begin, std::int64_t end, float* flat,
             core::Device device = core::Device::cpu) const;

 private:
  // The logical position of flat element `offset`, which lies in one of the ranges.
  std::int64_t logical_of(std::int64_t offset) const;

  std::vector<ParameterRange> ranges_;
  std::vector<std::int64_t> starts_{0};  // logical start of each range, then the total
  int shards_ = 1;
  int index_ = 0;
};

struct OptimizerShards {
  KindShards dense;
  KindShards expert;
  // The flat ranges this rank keeps state for: its dense piece's runs, then its expert
  // piece's, each with its range's weight-decay class and kind.
  std::vector<ParameterRange> owned_ranges;
  std::int64_t owned_elements = 0;  // dense.owned().count() + expert.owned().count()
};

// `partition` is this rank's (parallel::partition_parameters); dense state is split over
// dense_shards ranks (the pool), expert state over expert_shards (the expert-DP group).
OptimizerShards plan_optimizer_shards(const ParameterPartition& partition, int dense_shards,
                                      int dense_index, int expert_shards, int expert_index);

}  // namespace dyncp::parallel
