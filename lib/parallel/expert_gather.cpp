#include "parallel/expert_gather.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

model::ExpertRange local_expert_range(std::int64_t num_experts, const dist::Comm& expert_parallel) {
  const int ep = expert_parallel.size();
  if (num_experts % ep != 0) {
    core::throw_config_error(
        "model.expert_model_parallel_size",
        std::to_string(ep) + ": must divide num_experts (" + std::to_string(num_experts) + ")");
  }
  const std::int64_t count = num_experts / ep;
  return {expert_parallel.rank() * count, count};
}

void EpExpertGather::gather(std::span<const float> slice, std::span<float> whole) {
  DYNCP_CHECK(whole.size() == slice.size() * static_cast<std::size_t>(group_.size()),
              "a whole expert tensor is ep slices");
  group_.all_gather(slice.data(), slice.size(), whole.data(), core::DType::f32);
}

}  // namespace dyncp::parallel
