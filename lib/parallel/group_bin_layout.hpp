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

// The tensors come from `keep` and stay valid for the bin.
GroupBinLayout gather_group_bin_layout(dist::Comm& group, core::Arena& keep,
                                       const model::LocalBinLayout& local, std::string_view who);

}  // namespace dyncp::parallel
