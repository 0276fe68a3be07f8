#pragma once
// The tensor-parallel seam over a TP group's communicator (model/tensor_parallel.hpp): sums,
// row gathers and row reduce-scatters of tensors on either device (device tensors move over
// the communicator's device channel). Its time is reported as TP communication.

#include <vector>

#include "dist/comm.hpp"
#include "model/tensor_parallel.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

class TensorParallelGroup final : public model::TensorParallelContext {
 public:
  explicit TensorParallelGroup(dist::Comm& group, SeamCounters* counters = nullptr)
      : group_(group), counters_(counters) {}

  int size() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void all_reduce(const model::SeamContext& context, const core::Tensor& x) override;
  void all_gather_rows(const model::SeamContext& context, const core::Tensor& shard,
                       const core::Tensor& full) override;
  void reduce_scatter_rows(const model::SeamContext& context, const core::Tensor& full,
                           const core::Tensor& shard) override;

 private:
  double& time() { return counters_ != nullptr ? counters_->tp_comm_ms : unreported_ms_; }

  dist::Comm& group_;
  SeamCounters* counters_;
  double unreported_ms_ = 0;
  std::vector<std::size_t> counts_;
};

}  // namespace dyncp::parallel
