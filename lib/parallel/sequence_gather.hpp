#pragma once
// Whole sequences out of a CP group's zigzag shards, for the layers whose sequence-level part
// runs along the sequence in order (the Gated DeltaNet's conv window and recurrent state):
// every rank of a group of c holds chunks k and 2c−1−k of every sequence of the bin, so the
// group together holds each sequence once; gathering puts its rows back in position order.
//
//   Example, c = 2, one sequence of 8 rows: rank 0 holds positions {0,1,6,7}, rank 1 {2,3,4,5};
//   gathered in rank order the rows are [0,1,6,7,2,3,4,5]; the whole sequence is rows
//   0,1,4,5,6,7,2,3 of that, and rank 0 keeps whole rows {0,1,6,7} again.
//
// begin_bin is collective over the group and checks that every rank holds the same bin and that
// each sequence's positions are exactly 0..L−1 once over the group (anything else is a runtime
// error naming the rank and group).

#include <cstdint>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "model/seams.hpp"

namespace dyncp::parallel {

class SequenceGather {
 public:
  // Collective. `keep` holds the layout for the bin (e.g. the model's activation arena).
  void begin_bin(dist::Comm& group, core::Arena& keep, const model::LocalBinLayout& layout);

  std::int64_t local_rows() const { return local_rows_; }
  std::int64_t whole_rows() const { return whole_positions_.numel(); }
  // The bin as one rank holding every sequence whole: cu_seqlens i32 [S + 1], positions i32 [W].
  model::LocalBinLayout whole_layout() const { return {whole_cu_seqlens_, whole_positions_}; }

  // Collective: local [T, ...] -> whole [W, ...] (sequence, then position order). The
  // rank-order staging buffer comes from `scratch`.
  void gather(const core::Tensor& local, const core::Tensor& whole, core::Arena& scratch,
              double& comm_ms);
  // Local: this rank's rows of whole [W, ...] into local [T, ...].
  void keep_own(const core::Tensor& whole, const core::Tensor& local) const;

 private:
  dist::Comm* group_ = nullptr;
  std::int64_t local_rows_ = 0;
  core::Tensor whole_cu_seqlens_;
  core::Tensor whole_positions_;
  core::Tensor whole_from_gathered_;  // i32 [W]: rank-order gathered row of each whole row
  core::Tensor own_in_whole_;         // i32 [T]: whole row of each of this rank's rows
};

}  // namespace dyncp::parallel
