#pragma once
// Gradient synchronisation after a step's last microbatch (docs/architecture.md §4.6):
// dense gradients are summed over the pool, expert gradients over the expert-data-parallel
// group. Sums only: the 1 / (global loss tokens) normalisation is folded into the optimizer's
// gradient scale, so no group size ever enters it.
//
// Small ranges are packed into a bucket (one collective for many tensors); a range at least
// as large as the bucket is reduced in place. Every rank walks the ranges in the same order.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.hpp"
#include "dist/comm.hpp"
#include "parallel/parameter_partition.hpp"
#include "parallel/tensor_parallel_gradients.hpp"

namespace dyncp::parallel {

class GradientSync {
 public:
  GradientSync(const ParameterPartition& partition, float* gradients, dist::Comm& pool,
               dist::Comm& expert_data_parallel, dist::Comm& expert_parallel,
               std::int64_t bucket_elements = std::int64_t{4} << 20);

  // The gradients live on `device` (cuda: each run of one kind's ranges is summed in place over
  // the communicators' device channel, and only one norm value per range crosses to the host).
  void set_device(core::Device device);
  // Tensor parallelism: the TP-partial gradients of `all_grads` are summed over
  // `tensor_parallel` before the data-parallel sums, and the norm sums the pieces of split
  // tensors over their group (expert pieces over `expert_tensor_parallel` when etp > 1).
  void set_tensor_parallel(dist::Comm& tensor_parallel, dist::Comm& expert_tensor_parallel,
                           const core::Tensor& all_grads);

  void reduce_gradients();

  // Σ g² over the whole model's gradient, each element counted once over all ranks (dense
  // replicas once, every expert once); identical on every rank. Call after reduce_gradients.
  double global_sum_of_squares();

 private:
  void reduce_kind(bool experts, dist::Comm& comm);
  void reduce_spans_in_place(bool experts, dist::Comm& comm);

  const ParameterPartition& partition_;
  float* gradients_;
  dist::Comm& pool_;
  dist::Comm& expert_data_parallel_;
  dist::Comm& expert_parallel_;
  std::vector<float> bucket_;
  std::vector<const ParameterRange*> packed_;
  core::Device device_ = core::Device::cpu;
  std::unique_ptr<core::Arena> device_scratch_;
  dist::Comm* tensor_parallel_ = nullptr;
  dist::Comm* expert_tensor_parallel_ = nullptr;
  core::Tensor all_grads_;
  std::unique_ptr<TensorParallelGradientSum> tensor_parallel_sum_;
};

}  // namespace dyncp::parallel
