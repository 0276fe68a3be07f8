#pragma once
// Single-writer checkpoints under pipeline stages (model::StageTensorRelay): the writer (world
// rank 0) holds only stage 0, so the first rank of every other stage relays its stage's tensors
// to it over their pipeline group (stage position 0 of every stage), one tensor at a time, in
// file order, blocking: the writer receives each in turn from the stage that holds it (the
// layer's stage in Megatron's split; the embedding stage 0's, the final norm and head the last
// stage's). The other ranks of each relay's EP group join its expert gathers.

#include "config/pipeline_split.hpp"
#include "dist/comm.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::train {

class PipelineTensorRelay final : public model::StageTensorRelay {
 public:
  // `pipeline`: this rank's pipeline group (the writer's and the relays' join stage position 0
  // of every stage); it must outlive this.
  PipelineTensorRelay(Role role, dist::Comm& pipeline, const config::PipelineSplit& split);

  Role role() const override { return role_; }
  bool writer_holds(const model::WholeModelTensor& tensor) const override {
    return stage_of(tensor) == 0;
  }
  void receive(const model::WholeModelTensor& tensor, std::span<float> out) override;
  void send(const model::WholeModelTensor& tensor, std::span<const float> values) override;

  // The stage holding `tensor`.
  std::int64_t stage_of(const model::WholeModelTensor& tensor) const;

 private:
  Role role_;
  dist::Comm& pipeline_;
  config::PipelineSplit split_;
};

}  // namespace dyncp::train
