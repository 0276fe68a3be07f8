#pragma once
// Moment buffers for checkpoint tests: laid out like a rank's parameters, each HF tensor's values
// a function of its name and element, so any expert slice and the whole model agree on the
// tensors they share and a round trip through any layout can be compared exactly.

#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::test {

inline core::Tensor moments_for(const model::Qwen3MoeParameters& parameters, std::uint64_t salt) {
  core::Tensor flat = core::Tensor::zeros(parameters.all_values().shape(), core::DType::f32);
  const float* base = parameters.all_values().data<float>();
  for (const auto& tensor : parameters.hf_tensors()) {
    std::uint64_t key = salt;
    for (const char c : tensor.name) key = key * 131 + static_cast<unsigned char>(c);
    float* out = flat.data<float>() + (tensor.value.data<float>() - base);
    for (std::int64_t i = 0; i < tensor.value.numel(); ++i)
      out[i] = static_cast<float>(core::random_bits(key, core::RngPurpose::test, 0,
                                                    static_cast<std::uint64_t>(i)) >>
                                  40) *
               0x1.0p-24f;
  }
  return flat;
}

}  // namespace dyncp::test

namespace dyncp::test {

// Moment buffers whose values are a function of each HF tensor's name and HF element index:
// the same whole tensors whatever piece of them (tensor parallelism) or slice of the experts
// a rank holds.
inline core::Tensor hf_keyed_moments_for(const model::Qwen3MoeParameters& parameters,
                                         std::uint64_t salt) {
  core::Tensor flat = core::Tensor::zeros(parameters.all_values().shape(), core::DType::f32);
  const float* base = parameters.all_values().data<float>();
  std::vector<float> whole;
  for (const auto& tensor : parameters.hf_tensors()) {
    std::uint64_t key = salt;
    for (const char c : tensor.name) key = key * 131 + static_cast<unsigned char>(c);
    whole.resize(static_cast<std::size_t>(tensor.hf_numel()));
    for (std::size_t i = 0; i < whole.size(); ++i)
      whole[i] = static_cast<float>(core::random_bits(key, core::RngPurpose::test, 1, i) >> 40) *
                 0x1.0p-24f;
    const core::Tensor view =
        core::Tensor::view_of(flat.data<float>() + (tensor.value.data<float>() - base),
                              tensor.value.shape(), core::DType::f32);
    tensor.write_hf_order(whole.data(), view);
  }
  return flat;
}

}  // namespace dyncp::test
