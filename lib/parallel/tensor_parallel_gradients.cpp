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
  summed_.assign(ranges_.size(), 0);
}

void TensorParallelGradientSum::sum_touching(const core::Tensor& gradients, std::int64_t begin,
                                             std::int64_t end) {
  if (empty()) return;
  const auto pieces = [&](auto&& fn) {
    std::int64_t at = 0;
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      const ParameterRange& range = ranges_[i];
      if (summed_[i] != 0 || range.offset >= end || range.offset + range.count <= begin) continue;
      fn(i, gradients.slice(range.offset, range.offset + range.count),
         staging_.slice(at, at + range.count));
      at += range.count;
    }
    return at;
  };
  const std::int64_t packed = pieces([](std::size_t, const core::Tensor& grad,
                                        const core::Tensor& staged) { staged.copy_from(grad); });
  if (packed == 0) return;
  tensor_parallel_.all_reduce(staging_.raw_data(), staging_.raw_data(),
                              static_cast<std::size_t>(packed), core::DType::f32,
                              dist::ReduceOp::sum);
  pieces([&](std::size_t i, const core::Tensor& grad, const core::Tensor& staged) {
    grad.copy_from(staged);
    summed_[i] = 1;
  });
}

}  // namespace dyncp::parallel
