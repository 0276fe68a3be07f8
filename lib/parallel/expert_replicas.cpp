#include "parallel/expert_replicas.hpp"

#include <cstring>
#include <vector>

namespace dyncp::parallel {

void gather_expert_replicas(const model::Qwen3MoeParameters& parameters,
                            std::span<const core::Tensor> flat_buffers,
                            dist::Comm& expert_parallel) {
  if (expert_parallel.size() == 1) return;
  const auto* base = static_cast<const float*>(parameters.all_values().raw_data());
  std::vector<float> slice;
  for (const model::DecoderLayerParams& layer : parameters.layers) {
    if (!layer.is_moe) continue;
    for (const core::Tensor* fused : {&layer.moe.experts.gate_up.value, &layer.moe.experts.down.value}) {
      const std::int64_t offset = static_cast<const float*>(fused->raw_data()) - base;
      const std::int64_t per_rank = fused->numel() / expert_parallel.size();
      slice.resize(static_cast<std::size_t>(per_rank));
      for (const core::Tensor& buffer : flat_buffers) {
        float* whole = buffer.data<float>() + offset;
        std::memcpy(slice.data(), whole + expert_parallel.rank() * per_rank,
                    static_cast<std::size_t>(per_rank) * sizeof(float));
        expert_parallel.all_gather(slice.data(), static_cast<std::size_t>(per_rank), whole,
                                   core::DType::f32);
      }
    }
  }
}

}  // namespace dyncp::parallel
