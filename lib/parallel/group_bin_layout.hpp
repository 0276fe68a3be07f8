#pragma once
// What every rank of a CP group holds of the current bin, gathered once per bin by the seams
// that exchange rows over the group (CP attention, the ring, the DeltaNet sequence gather).
// Collective over the group. Every rank must hold the zigzag shard of the same bin: the same
// number of sequences and of local rows (2 of 2c equal chunks of every sequence); anything else
// is a runtime error naming `who`, this rank, the group and the first rank that differs.

#include <cstdint>
#include <string_view>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "model/seams.hpp"

namespace dyncp::parallel {

struct GroupBinLayout {
  std::int64_t ranks = 1;
  std::int64_t local_rows = 0;  // per rank (equal on every rank)
  std::int64_t sequences = 0;
  core::Tensor positions;   // i32 [ranks * local_rows]: rank r's rows at r * local_rows
  core::Tensor cu_seqlens;  // i32 [ranks * (sequences + 1)]: rank r's at r * (sequences + 1)

  core::Tensor positions_of(std::int64_t rank) const {
    return positions.slice(rank * local_rows, (rank + 1) * local_rows);
  }
  core::Tensor cu_seqlens_of(std::int64_t rank) const {
    return cu_seqlens.slice(rank * (sequences + 1), (rank + 1) * (sequences + 1));
  }
};

// Host metadata (the seams plan their row moves from it, on the host, whatever the device):
// the tensors come from `host` and stay valid for the bin; it travels over the group's host
// channel.
GroupBinLayout gather_group_bin_layout(dist::Comm& group, core::Arena& host,
                                       const model::LocalBinLayout& local, std::string_view who);

// The group's rows regrouped by sequence, in position order inside each sequence: what one rank
// holding all of them would see. "Gathered" rows are the group's rows in rank order (rank r's
// local rows at r x local_rows, as an all-gather or all-to-all delivers them).
//   Example, c = 2, one sequence of 8 rows: rank 0 holds positions {0,1,6,7}, rank 1 {2,3,4,5};
//   gathered in rank order the rows are [0,1,6,7,2,3,4,5]; merged, the sequence is gathered rows
//   0,1,4,5,6,7,2,3, and rank 0's own rows are merged rows {0,1,6,7}.
struct MergedGroupRows {
  model::LocalBinLayout layout;  // cu_seqlens i32 [S + 1], positions i32 [ranks x local_rows]
  core::Tensor from_gathered;    // i32 [ranks x local_rows]: gathered row of each merged row
  core::Tensor own_in_merged;    // i32 [local_rows]: merged row of each of `rank`'s rows
};

// With whole_sequences, each sequence's positions must be exactly 0..L-1 once over the group
// (a runtime error naming `who` and the group otherwise), as they are when the group holds the
// whole bin; a subgroup's rows are any positions.
MergedGroupRows merge_group_rows(const GroupBinLayout& gathered, int rank, core::Arena& keep,
                                 bool whole_sequences, std::string_view who,
                                 std::string_view group_name);

// `host` itself when `like` is a host tensor, else a copy on `like`'s device from `keep`
// (positions the kernels read on the device).
core::Tensor on_device_of(const core::Tensor& like, core::Arena& keep, const core::Tensor& host);

}  // namespace dyncp::parallel
