#pragma once
// The Ulysses all-to-all on a CP (sub)group of a ranks: from "this rank's rows, every head" to
// "every rank's rows, this rank's heads", and back. Every rank holds the zigzag shard of every
// sequence of the bin (T local rows); after to_heads it holds the group's a x T rows of each
// sequence, regrouped by sequence in position order (the merged rows of group_bin_layout.hpp;
// whole sequences when the group is the whole runtime group), for its slice of the heads
// (config/head_sharding.hpp).
//
//   to_heads   local [T, H, w] -> pack one block per destination (its heads) -> all_to_all ->
//              rank-order rows [a·T, n, w] -> merged order (one row gather)
//   from_heads the reverse; where K/V heads are replicated the replicas' blocks are summed
//              (the gradient of a replicated input is the sum over its copies)
//
// Bytes per call and rank: (a−1)/a of a local [T, H, w] tensor without replication, (a−1)·T·n·w
// elements with it (each replica receives its own copy). Temporaries come from `scratch`.

#include <cstdint>
#include <string_view>
#include <vector>

#include "config/head_sharding.hpp"
#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_bin_layout.hpp"
#include "parallel/hierarchical_groups.hpp"

namespace dyncp::parallel {

// Which heads each rank of the group holds, for one tensor kind.
struct HeadSlices {
  std::int64_t heads_per_rank = 0;
  std::vector<std::int64_t> first_head;  // per group rank
  bool replicated = false;               // some head is held by more than one rank

  // The query-side heads (split) or the K/V-side heads (split or replicated) of `sharding`.
  void assign_query_side(const config::HeadSharding& sharding);
  void assign_kv_side(const config::HeadSharding& sharding);
};

class HeadExchange {
 public:
  // Collective over `group`: gathers every rank's layout and merges the rows. With
  // whole_sequences the group must hold every position of every sequence once (a2a: the group
  // is the runtime group); a subgroup (a2a+p2p's inner group) holds any part. The row plan is
  // host memory (context.host_arena()); the merged positions the kernels read are copied to
  // the tensors' device (context.activations). The exchanges run with context.ops.
  void begin_bin(dist::Comm& group, const model::SeamContext& context,
                 const model::LocalBinLayout& local, bool whole_sequences, std::string_view who);

  int group_size() const { return group_->size(); }
  int group_rank() const { return group_->rank(); }
  std::int64_t merged_rows() const { return merged_.layout.positions.numel(); }
  // The merged rows as one rank holding them would see them (cu_seqlens, positions).
  const model::LocalBinLayout& merged_layout() const { return merged_.layout; }

  // [merged_rows, heads_per_rank, w...] shaped like `local` but with this rank's heads.
  core::Tensor allocate_heads(core::Arena& arena, const core::Tensor& local,
                              const HeadSlices& slices) const;

  // Collective: local [T, H, ...] -> heads [merged_rows, n, ...] (this rank's slice).
  void to_heads(const core::Tensor& local, const HeadSlices& slices, const core::Tensor& heads,
                core::Arena& scratch, double& comm_ms);
  // Collective: heads [merged_rows, n, ...] -> local [T, H, ...] (overwritten; replicated
  // heads summed).
  void from_heads(const core::Tensor& heads, const HeadSlices& slices, const core::Tensor& local,
                  core::Arena& scratch, double& comm_ms);

 private:
  dist::Comm* group_ = nullptr;
  ops::OpContext ops_;
  std::int64_t local_rows_ = 0;
  MergedGroupRows merged_;
};

// What both head-sharded seams run after the all-to-all: `Seam` (the K/V ring, or DeltaNet
// state passing) on the ring communicator over the merged rows (its one-rank path when there
// is no ring). Its communication time is folded into the owner's.
template <typename Seam>
class RingLevel {
 public:
  RingLevel() : seam_(&counters_) {}
  Seam& seam() { return seam_; }

  // Per bin: the all-to-all layout over levels.all_to_all (whole sequences when there is no
  // ring), then the seam on levels.ring over the merged rows.
  void begin_bin(const HierarchicalGroups::Levels& levels, HeadExchange& exchange,
                 const model::SeamContext& context, const model::LocalBinLayout& layout,
                 std::string_view who, double& comm_ms) {
    {
      ScopedMilliseconds timer(comm_ms);
      exchange.begin_bin(*levels.all_to_all, context, layout,
                         /*whole_sequences=*/levels.ring == nullptr, who);
    }
    seam_.set_group(levels.ring);
    seam_.begin_bin(context, exchange.merged_layout());
    collect(comm_ms);
  }
  // Adds the seam's communication time since the last call to comm_ms.
  void collect(double& comm_ms) {
    comm_ms += counters_.cp_comm_ms;
    counters_.reset();
  }

 private:
  SeamCounters counters_;
  Seam seam_;
};

}  // namespace dyncp::parallel
