#include "parallel/expert_tensor_parallel.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/local_seams.hpp"
#include "ops/elementwise.hpp"
#include "parallel/expert_row_blocks.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

ExpertTensorParallel::ExpertTensorParallel(dist::Comm& expert_tensor_parallel_group,
                                           std::int64_t num_local_experts, std::int64_t num_layers,
                                           SeamCounters* counters)
    : group_(expert_tensor_parallel_group),
      num_local_experts_(num_local_experts),
      counters_(counters),
      counts_(static_cast<std::size_t>(num_layers)),
      own_counts_(static_cast<std::size_t>(num_local_experts)),
      element_counts_(static_cast<std::size_t>(expert_tensor_parallel_group.size())) {}

std::int64_t ExpertTensorParallel::rows_of(const Tensor& counts, std::int64_t rank) const {
  const std::int64_t* row = counts.data<std::int64_t>() + rank * num_local_experts_;
  std::int64_t total = 0;
  for (std::int64_t e = 0; e < num_local_experts_; ++e) total += row[e];
  return total;
}

void ExpertTensorParallel::gather_rows(const model::SeamContext& context, const Tensor& counts,
                                       const Tensor& mine, const Tensor& gathered) {
  const std::int64_t width = mine.size(1);
  for (int r = 0; r < group_.size(); ++r)
    element_counts_[static_cast<std::size_t>(r)] =
        static_cast<std::size_t>(rows_of(counts, r) * width);
  core::ArenaScope scope(*context.scratch);
  const Tensor arrived = context.scratch->allocate(gathered.shape(), mine.dtype());
  {
    ScopedMilliseconds timer(time());
    group_.all_gather_v(mine.raw_data(), static_cast<std::size_t>(mine.numel()), arrived.raw_data(),
                        element_counts_, mine.dtype());
  }
  regroup_expert_blocks(context.ops, counts.data<std::int64_t>(), group_.size(), num_local_experts_,
                        arrived, gathered,
                        /*source_major_to_expert_major=*/true, cursor_);
}

void ExpertTensorParallel::reduce_scatter_rows(const model::SeamContext& context,
                                               const Tensor& counts, const Tensor& every,
                                               const Tensor& mine) {
  std::int64_t largest = 0;
  for (int r = 0; r < group_.size(); ++r) largest = std::max(largest, rows_of(counts, r));
  const std::int64_t width = every.size(1);
  core::ArenaScope scope(*context.scratch);
  const Tensor padded = context.scratch->allocate({group_.size() * largest, width}, every.dtype());
  padded.fill_zero();
  regroup_expert_blocks(context.ops, counts.data<std::int64_t>(), group_.size(), num_local_experts_,
                        every, padded,
                        /*source_major_to_expert_major=*/false, cursor_, largest);
  const Tensor summed = context.scratch->allocate({largest, width}, every.dtype());
  {
    ScopedMilliseconds timer(time());
    group_.reduce_scatter(padded.raw_data(), summed.raw_data(),
                          static_cast<std::size_t>(summed.numel()), every.dtype(),
                          dist::ReduceOp::sum);
  }
  const Tensor own = summed.slice(0, mine.size(0));
  if (own.dtype() == mine.dtype()) {
    mine.copy_from(own);
  } else {
    ops::convert(context.ops, own, mine);
  }
}

void ExpertTensorParallel::forward(const model::SeamContext& context, int layer, const Tensor& rows,
                                   const Tensor& host_offsets, const model::ExpertWeights& weights,
                                   const Tensor& y, model::ExpertSaved& saved) {
  DYNCP_CHECK(
      host_offsets.device() == core::Device::cpu && host_offsets.numel() == num_local_experts_ + 1,
      "expert-TP rows come with host offsets of the local experts");
  core::Arena& host = context.host_arena();
  const std::int64_t* offsets = host_offsets.data<std::int64_t>();
  for (std::int64_t e = 0; e < num_local_experts_; ++e)
    own_counts_[static_cast<std::size_t>(e)] = offsets[e + 1] - offsets[e];
  Tensor& counts = counts_.at(static_cast<std::size_t>(layer));
  counts = host.allocate({group_.size(), num_local_experts_}, DType::i64);
  {
    ScopedMilliseconds timer(time());
    group_.all_gather(own_counts_.data(), static_cast<std::size_t>(num_local_experts_),
                      counts.raw_data(), DType::i64);
  }
  // Every rank's rows, grouped by expert, and their offsets.
  Tensor group_offsets = host.allocate({num_local_experts_ + 1}, DType::i64);
  std::int64_t* group = group_offsets.data<std::int64_t>();
  group[0] = 0;
  for (std::int64_t e = 0; e < num_local_experts_; ++e) {
    group[e + 1] = group[e];
    for (int r = 0; r < group_.size(); ++r)
      group[e + 1] += counts.data<std::int64_t>()[r * num_local_experts_ + e];
  }
  const std::int64_t total = group[num_local_experts_];
  if (rows.device() != core::Device::cpu) {
    const Tensor on_device = context.activations->allocate(group_offsets.shape(), DType::i64);
    on_device.copy_from(group_offsets);
    group_offsets = on_device;
  }
  const Tensor every = context.activations->allocate({total, rows.size(1)}, rows.dtype());
  gather_rows(context, counts, rows, every);
  core::ArenaScope scope(*context.scratch);
  const Tensor partial =
      context.scratch->allocate({total, rows.size(1)}, weights.gate_up.value.dtype());
  model::run_experts_forward(context, every, group_offsets, weights, partial, saved);
  reduce_scatter_rows(context, counts, partial, y);
}

void ExpertTensorParallel::backward(const model::SeamContext& context, int layer, const Tensor& dy,
                                    const model::ExpertWeights& weights,
                                    const model::ExpertSaved& saved, const Tensor& drows) {
  const Tensor& counts = counts_.at(static_cast<std::size_t>(layer));
  const std::int64_t total = saved.rows.size(0);
  core::ArenaScope scope(*context.scratch);
  const Tensor every_dy = context.scratch->allocate({total, dy.size(1)}, dy.dtype());
  gather_rows(context, counts, dy, every_dy);
  const Tensor every_drows = context.scratch->allocate({total, dy.size(1)}, dy.dtype());
  model::run_experts_backward(context, every_dy, weights, saved, every_drows);
  reduce_scatter_rows(context, counts, every_drows, drows);
}

}  // namespace dyncp::parallel
