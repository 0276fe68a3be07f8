#include "parallel/tensor_parallel_gradients.hpp"

#include <algorithm>

namespace dyncp::parallel {

TensorParallelGradientSum::TensorParallelGradientSum(const ParameterPartition& partition,
                                                     dist::Comm& tensor_parallel,
                                                     core::Device device)
    : tensor_parallel_(tensor_parallel) {
  std::int64_t total = 0;
  for (const ParameterRange& range : partition.ranges) {
    if (!range.tp_partial_grad) continue;
    ranges_.push_back(range);
    total += range.count;
  }
  if (total > 0) staging_ = core::Tensor::zeros({total}, core::DType::f32, device);
}

void TensorParallelGradientSum::sum(const core::Tensor& gradients, std::int64_t begin,
                                    std::int64_t end) {
  if (empty()) return;
  if (end < 0) end = gradients.numel();
  const auto pieces = [&](auto&& fn) {
    std::int64_t at = 0;
    for (const ParameterRange& range : ranges_) {
      if (range.offset < begin || range.offset + range.count > end) continue;
      fn(gradients.slice(range.offset, range.offset + range.count),
         staging_.slice(at, at + range.count));
      at += range.count;
    }
    return at;
  };
  const std::int64_t packed =
      pieces([](const core::Tensor& grad, const core::Tensor& staged) { staged.copy_from(grad); });
  if (packed == 0) return;
  tensor_parallel_.all_reduce(staging_.raw_data(), staging_.raw_data(),
                              static_cast<std::size_t>(packed), core::DType::f32,
                              dist::ReduceOp::sum);
  pieces([](const core::Tensor& grad, const core::Tensor& staged) { grad.copy_from(staged); });
}

}  // namespace dyncp::parallel
