#pragma once
// The collectives through which the ranks of a layout help one writer (world rank 0) write
// whole-model files from their slices and pieces (model/whole_model_tensors.hpp): the
// single-writer training checkpoint and model::save_hf_checkpoint. Under pipeline parallelism
// each stage's first rank (its relay to rank 0) is the rank its stage's groups help.
//
// Which ranks take part is a pure function of the layout (dist/parallel_layout.hpp):
//   dense tensors   the writer's TP group sums its pieces (tp > 1; nobody else at tp = 1);
//   experts         the writer's EP group gathers its slices, each made whole first over the
//                   expert-TP group of its holder (etp > 1): the etp x ep ranks
//                   [0, etp x ep) of the first stage.
// With etp = 1 the writer's EP group (ep consecutive ranks) may reach past its TP group and the
// TP group past the EP group; each rank runs only the collectives of the groups it shares with
// the writer, in the order of the writer's tensor list, so no group waits on a rank that is
// elsewhere.

#include "dist/comm.hpp"
#include "dist/parallel_state.hpp"
#include "model/whole_model_tensors.hpp"
#include "parallel/expert_gather.hpp"

namespace dyncp::parallel {

// A PieceSum over a communicator: an in-place all-reduce (f32, sum) of host buffers.
class GroupPieceSum final : public model::PieceSum {
 public:
  explicit GroupPieceSum(dist::Comm& group) : group_(group) {}
  void sum(std::span<float> values) override;

 private:
  dist::Comm& group_;
};

class WriterGathers {
 public:
  explicit WriterGathers(dist::ParallelState& parallel_state);
  WriterGathers(const WriterGathers&) = delete;
  WriterGathers& operator=(const WriterGathers&) = delete;

  // Points into this object: valid while it lives.
  const model::WholeModelGathers& gathers() const { return gathers_; }
  // Whether this rank has any part in the writer's rebuilds (the writer itself included).
  bool takes_part() const { return gathers_.dense || gathers_.experts; }

 private:
  GroupPieceSum tensor_parallel_;
  GroupPieceSum expert_tensor_parallel_;
  EpExpertGather expert_parallel_;
  model::WholeModelGathers gathers_;
};

}  // namespace dyncp::parallel
