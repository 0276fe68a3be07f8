#pragma once
// Gradients of whole (replicated) tensors that each tensor-parallel rank computed only in part
// (ParameterRange::tp_partial_grad: norms and gates acting on a rank's heads or rows, the
// router on its rows): summed over the TP group once per step, before the data-parallel sums
// and the gradient norm read them. The ranges are packed into one staging buffer on the
// gradients' device, summed with one all-reduce and unpacked.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "parallel/parameter_partition.hpp"

namespace dyncp::parallel {

class TensorParallelGradientSum {
 public:
  TensorParallelGradientSum(const ParameterPartition& partition, dist::Comm& tensor_parallel,
                            core::Device device);

  bool empty() const { return ranges_.empty() || tensor_parallel_.size() == 1; }
  // Sums every partial range of `gradients` (laid out like all_grads()) over the TP group, in
  // place.
  void sum(const core::Tensor& gradients) {
    begin_step();
    sum_touching(gradients, 0, gradients.numel());
  }
  // Sums, whole, the partial ranges that overlap flat [begin, end) and were not summed since
  // the last begin_step() (a bucket's spans may cut a tensor where the optimizer's pieces
  // change owner; the tensor is summed once, with its first span).
  void sum_touching(const core::Tensor& gradients, std::int64_t begin, std::int64_t end);
  void begin_step() { std::fill(summed_.begin(), summed_.end(), 0); }

 private:
  std::vector<ParameterRange> ranges_;
  std::vector<char> summed_;  // per range, since begin_step()
  dist::Comm& tensor_parallel_;
  core::Tensor staging_;
};

}  // namespace dyncp::parallel
