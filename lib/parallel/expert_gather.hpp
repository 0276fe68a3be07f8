#pragma once
// Expert slices under expert parallelism: EP rank j of an EP group of size ep holds (weights,
// gradients, optimizer moments) only experts [j E/ep, (j+1) E/ep) of every MoE layer.
// Expert tensors are fused per layer ([E/ep, 2I, h] and [E/ep, h, I] on each rank), so one
// all-gather over the EP group rebuilds a layer's whole tensor in expert order: what writers
// of layout-independent files use (model/whole_model_tensors.hpp).

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::parallel {

// The experts this rank holds; a config error when ep does not divide num_experts.
model::ExpertRange local_expert_range(std::int64_t num_experts, const dist::Comm& expert_parallel);

class EpExpertGather final : public model::ExpertGather {
 public:
  explicit EpExpertGather(dist::Comm& expert_parallel) : group_(expert_parallel) {}
  void gather(std::span<const float> slice, std::span<float> whole) override;

 private:
  dist::Comm& group_;
};

}  // namespace dyncp::parallel
