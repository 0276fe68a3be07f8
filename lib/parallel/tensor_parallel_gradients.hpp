#pragma once
// Gradients of whole (replicated) tensors that each tensor-parallel rank computed only in part
// (ParameterRange::tp_partial_grad: norms and gates acting on a rank's heads or rows, the
// router on its rows): summed over the TP group once per step, before the data-parallel sums
// and the gradient norm read them. The ranges are packed into one staging buffer on the
// gradients' device, summed with one all-reduce and unpacked.

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
  // Sums the partial ranges of `gradients` (laid out like all_grads()) lying in flat
  // [begin, end) (default: all of them) over the TP group, in place.
  void sum(const core::Tensor& gradients, std::int64_t begin = 0, std::int64_t end = -1);

 private:
  std::vector<ParameterRange> ranges_;
  dist::Comm& tensor_parallel_;
  core::Tensor staging_;
};

}  // namespace dyncp::parallel
