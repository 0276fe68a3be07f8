#pragma once
// Experts split over the expert-tensor-parallel group (model.expert_tensor_parallel_size =
// tp): every rank of the group holds the same experts, each one's 1/etp of the intermediate
// columns (gate/up rows, down columns). The rows a rank has for its experts (after the EP
// exchange, or its own without EP) are all-gathered over the group, every rank runs its
// columns of every expert on all of them, and the partial outputs are reduce-scattered back
// to the rank the rows came from (Megatron's expert TP). Backward mirrors it: the output
// gradients are gathered, each rank computes its columns' weight gradients on all rows (whole,
// nothing to sum) and its part of the rows' gradients, which are reduce-scattered home.
//
// Rows arrive grouped by local expert with host offsets (the exchange plans on the host).
// The reduce-scatter moves every rank's block padded to the largest, so each collective has one
// size on every rank.

#include <cstdint>
#include <vector>

#include "dist/comm.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

class ExpertTensorParallel {
 public:
  ExpertTensorParallel(dist::Comm& expert_tensor_parallel_group, std::int64_t num_local_experts,
                       std::int64_t num_layers, SeamCounters* counters = nullptr);

  int size() const { return group_.size(); }

  // rows [R, h] grouped by local expert (host_offsets i64 [E_local + 1] on the host); writes
  // y [R, h], the experts' whole outputs of these rows. Saved state from context.activations.
  void forward(const model::SeamContext& context, int layer, const core::Tensor& rows,
               const core::Tensor& host_offsets, const model::ExpertWeights& weights,
               const core::Tensor& y, model::ExpertSaved& saved);
  // drows [R, h] (overwrite) from dy [R, h]; weight gradients of this rank's columns accumulate.
  void backward(const model::SeamContext& context, int layer, const core::Tensor& dy,
                const model::ExpertWeights& weights, const model::ExpertSaved& saved,
                const core::Tensor& drows);

 private:
  double& time() { return counters_ != nullptr ? counters_->ep_comm_ms : unreported_ms_; }
  // Row counts of the layer's exchange: counts_[layer] = i64 [etp, E_local] (host).
  std::int64_t rows_of(const core::Tensor& counts, std::int64_t rank) const;
  // Every rank's rows of `mine` in rank order, regrouped expert-major into `gathered`.
  void gather_rows(const model::SeamContext& context, const core::Tensor& counts,
                   const core::Tensor& mine, const core::Tensor& gathered);
  // This rank's rows of expert-major `every` summed over the group, into `mine`.
  void reduce_scatter_rows(const model::SeamContext& context, const core::Tensor& counts,
                           const core::Tensor& every, const core::Tensor& mine);

  dist::Comm& group_;
  std::int64_t num_local_experts_;
  SeamCounters* counters_;
  double unreported_ms_ = 0;
  std::vector<core::Tensor> counts_;  // per layer
  std::vector<std::int64_t> own_counts_;
  std::vector<std::size_t> element_counts_;
  std::vector<std::int64_t> cursor_;
};

}  // namespace dyncp::parallel
