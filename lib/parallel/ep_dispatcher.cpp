#include "parallel/ep_dispatcher.hpp"

#include <cstring>
#include <numeric>
#include <string>

#include "core/error.hpp"
#include "model/local_seams.hpp"
#include "ops/elementwise.hpp"
#include "parallel/expert_row_blocks.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

EpExpertDispatcher::EpExpertDispatcher(dist::Comm& expert_parallel_group, std::int64_t num_experts,
                                       std::int64_t num_layers, SeamCounters* counters,
                                       dist::Comm* expert_tensor_parallel)
    : group_(expert_parallel_group),
      num_experts_(num_experts),
      num_local_experts_(num_experts / expert_parallel_group.size()),
      first_local_expert_(expert_parallel_group.rank() * num_local_experts_),
      counters_(counters),
      send_counts_(static_cast<std::size_t>(expert_parallel_group.size())),
      recv_counts_(static_cast<std::size_t>(expert_parallel_group.size())),
      source_cursor_(static_cast<std::size_t>(expert_parallel_group.size())),
      received_expert_rows_(static_cast<std::size_t>(num_layers)),
      sent_offsets_(static_cast<std::size_t>(num_layers)) {
  if (num_experts % expert_parallel_group.size() != 0) {
    core::throw_config_error("model.expert_model_parallel_size",
                             std::to_string(expert_parallel_group.size()) +
                                 ": must divide num_experts (" + std::to_string(num_experts) + ")");
  }
  if (expert_tensor_parallel != nullptr && expert_tensor_parallel->size() > 1)
    expert_tensor_parallel_ = std::make_unique<ExpertTensorParallel>(
        *expert_tensor_parallel, num_local_experts_, num_layers, counters);
}

void EpExpertDispatcher::run_local_forward(const model::SeamContext& context, int layer,
                                           const Tensor& rows, const Tensor& offsets,
                                           const Tensor& host_offsets,
                                           const model::ExpertWeights& weights, const Tensor& y,
                                           model::ExpertSaved& saved) {
  if (!expert_tensor_parallel_)
    return model::run_experts_forward(context, rows, offsets, weights, y, saved);
  Tensor on_host = host_offsets;
  if (!on_host.defined()) {
    // Device offsets of one EP rank's rows come down once: the expert-TP exchange sizes its
    // messages on the host.
    on_host = context.host_arena().allocate(offsets.shape(), DType::i64);
    on_host.copy_from(offsets);
  }
  expert_tensor_parallel_->forward(context, layer, rows, on_host, weights, y, saved);
}

void EpExpertDispatcher::run_local_backward(const model::SeamContext& context, int layer,
                                            const Tensor& dy, const model::ExpertWeights& weights,
                                            const model::ExpertSaved& saved, const Tensor& drows) {
  if (!expert_tensor_parallel_)
    return model::run_experts_backward(context, dy, weights, saved, drows);
  expert_tensor_parallel_->backward(context, layer, dy, weights, saved, drows);
}

void EpExpertDispatcher::check_local(const model::ExpertWeights& weights) const {
  const std::int64_t held = weights.gate_up.value.size(0);
  if (weights.first_expert != first_local_expert_ || held != num_local_experts_) {
    core::throw_runtime_error(
        "EP rank " + std::to_string(group_.rank()) + " owns experts [" +
        std::to_string(first_local_expert_) + ", " +
        std::to_string(first_local_expert_ + num_local_experts_) + ") but the model holds [" +
        std::to_string(weights.first_expert) + ", " + std::to_string(weights.first_expert + held) +
        "): build it with ModelOptions::experts = parallel::local_expert_range(...)");
  }
}

void EpExpertDispatcher::fill_send_counts(const Tensor& expert_offsets, std::int64_t row_elements) {
  const std::int64_t* offsets = expert_offsets.data<std::int64_t>();
  for (int dest = 0; dest < group_.size(); ++dest) {
    const std::int64_t rows =
        offsets[(dest + 1) * num_local_experts_] - offsets[dest * num_local_experts_];
    send_counts_[static_cast<std::size_t>(dest)] = static_cast<std::size_t>(rows * row_elements);
  }
}

void EpExpertDispatcher::fill_recv_counts(const Tensor& received_expert_rows,
                                          std::int64_t row_elements) {
  const std::int64_t* rows = received_expert_rows.data<std::int64_t>();
  for (int source = 0; source < group_.size(); ++source) {
    std::int64_t total = 0;
    for (std::int64_t e = 0; e < num_local_experts_; ++e)
      total += rows[source * num_local_experts_ + e];
    recv_counts_[static_cast<std::size_t>(source)] = static_cast<std::size_t>(total * row_elements);
  }
}

void EpExpertDispatcher::regroup(const ops::OpContext& ctx, const Tensor& received_expert_rows,
                                 const Tensor& from, const Tensor& to,
                                 bool source_major_to_expert_major) {
  regroup_expert_blocks(ctx, received_expert_rows.data<std::int64_t>(), group_.size(),
                        num_local_experts_, from, to, source_major_to_expert_major, source_cursor_);
}

void EpExpertDispatcher::forward(const model::SeamContext& context, int layer, const Tensor& x_perm,
                                 const Tensor& expert_offsets, const model::ExpertWeights& weights,
                                 const Tensor& y_perm, model::ExpertSaved& saved) {
  forward_beside(context, layer, x_perm, expert_offsets, weights, y_perm, saved, {});
}

void EpExpertDispatcher::forward_beside(const model::SeamContext& context, int layer,
                                        const Tensor& x_perm, const Tensor& expert_offsets,
                                        const model::ExpertWeights& weights, const Tensor& y_perm,
                                        model::ExpertSaved& saved,
                                        const std::function<void()>& beside) {
  check_local(weights);
  const model::ExpertWeights& local = weights;
  if (group_.size() == 1) {
    if (beside) beside();
    if (counters_ != nullptr) counters_->expert_rows += x_perm.size(0);
    run_local_forward(context, layer, x_perm, expert_offsets,
                      expert_offsets.device() == core::Device::cpu ? expert_offsets : Tensor{},
                      local, y_perm, saved);
    return;
  }
  DYNCP_CHECK(expert_offsets.numel() == num_experts_ + 1, "expert offsets cover every expert");
  core::Arena& keep = *context.activations;
  core::Arena& host = context.host_arena();  // counts and offsets: the host plans with them
  core::Arena& scratch = *context.scratch;
  const std::int64_t hidden = x_perm.size(1);
  // Device offsets (grouped products) come down once, here: the exchange sizes its messages on
  // the host. The backward reuses this copy.
  const bool device_offsets = expert_offsets.device() != core::Device::cpu;
  Tensor& sent_offsets = sent_offsets_.at(static_cast<std::size_t>(layer));
  sent_offsets = expert_offsets;
  if (device_offsets) {
    sent_offsets = host.allocate(expert_offsets.shape(), DType::i64);
    sent_offsets.copy_from(expert_offsets);
  }
  const std::int64_t* offsets = sent_offsets.data<std::int64_t>();

  // 1. Per-(destination, expert) row counts are the global expert histogram, destination-major.
  Tensor& received = received_expert_rows_.at(static_cast<std::size_t>(layer));
  received = host.allocate({group_.size(), num_local_experts_}, DType::i64);
  {
    sent_rows_.resize(static_cast<std::size_t>(num_experts_));
    for (std::int64_t e = 0; e < num_experts_; ++e)
      sent_rows_[static_cast<std::size_t>(e)] = offsets[e + 1] - offsets[e];
    ScopedMilliseconds timer(ep_time());
    group_.all_to_all(sent_rows_.data(), received.raw_data(),
                      static_cast<std::size_t>(num_local_experts_), DType::i64);
  }
  fill_send_counts(sent_offsets, hidden);
  fill_recv_counts(received, hidden);
  std::int64_t received_rows = 0;
  for (const std::size_t count : recv_counts_)
    received_rows += static_cast<std::int64_t>(count) / hidden;
  if (counters_ != nullptr) counters_->expert_rows += received_rows;

  // 2-3. Rows to their experts' owners; regroup by local expert; run the experts.
  // Under bf16 activations x_perm, the kept rows and y_perm are bf16: the rows travel in bf16
  // both ways and the expert products read them as stored. The outputs are computed in the
  // weights' dtype.
  const DType row_dtype = local.gate_up.value.dtype();
  const Tensor rows = keep.allocate({received_rows, hidden}, x_perm.dtype());
  Tensor group_offsets = host.allocate({num_local_experts_ + 1}, DType::i64);
  {
    std::int64_t* group = group_offsets.data<std::int64_t>();
    const std::int64_t* counts = received.data<std::int64_t>();
    group[0] = 0;
    for (std::int64_t e = 0; e < num_local_experts_; ++e) {
      group[e + 1] = group[e];
      for (std::int64_t s = 0; s < group_.size(); ++s)
        group[e + 1] += counts[s * num_local_experts_ + e];
    }
  }
  const Tensor host_group_offsets = group_offsets;
  if (device_offsets && !expert_tensor_parallel_) {
    // The local experts' offsets go up for the grouped products (an upload: no wait).
    const Tensor on_device = keep.allocate(group_offsets.shape(), DType::i64);
    on_device.copy_from(group_offsets);
    group_offsets = on_device;
  }
  core::ArenaScope scope(scratch);
  const Tensor arrived = scratch.allocate({received_rows, hidden}, x_perm.dtype());
  if (beside) {
    // The rows travel while `beside` runs (its allocations sit above `arrived` in scratch).
    dist::Comm::Pending travelling;
    {
      ScopedMilliseconds timer(ep_time());
      travelling = group_.start_all_to_all_v(x_perm.raw_data(), send_counts_, arrived.raw_data(),
                                             recv_counts_, x_perm.dtype());
    }
    beside();
    if (counters_ != nullptr) ++counters_->exchanges_with_work_beside;
    ScopedMilliseconds timer(ep_time());
    group_.order_compute_after(travelling);
  } else {
    ScopedMilliseconds timer(ep_time());
    group_.all_to_all_v(x_perm.raw_data(), send_counts_, arrived.raw_data(), recv_counts_,
                        x_perm.dtype());
  }
  regroup(context.ops, received, arrived, rows, /*source_major_to_expert_major=*/true);
  const Tensor outputs = scratch.allocate({received_rows, hidden}, row_dtype);
  run_local_forward(context, layer, rows, group_offsets, host_group_offsets, local, outputs, saved);

  // 4. Outputs home, in the order the rows came (in y_perm's dtype).
  const Tensor home = y_perm.dtype() == arrived.dtype()
                          ? arrived
                          : scratch.allocate({received_rows, hidden}, y_perm.dtype());
  regroup(context.ops, received, outputs, home, /*source_major_to_expert_major=*/false);
  ScopedMilliseconds timer(ep_time());
  group_.all_to_all_v(home.raw_data(), recv_counts_, y_perm.raw_data(), send_counts_,
                      y_perm.dtype());
}

void EpExpertDispatcher::backward(const model::SeamContext& context, int layer,
                                  const Tensor& dy_perm, const Tensor&,
                                  const model::ExpertWeights& weights,
                                  const model::ExpertSaved& saved, const Tensor& dx_perm) {
  check_local(weights);
  const model::ExpertWeights& local = weights;
  if (group_.size() == 1) {
    run_local_backward(context, layer, dy_perm, local, saved, dx_perm);
    return;
  }
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const std::int64_t hidden = dy_perm.size(1);
  const Tensor& received = received_expert_rows_.at(static_cast<std::size_t>(layer));
  fill_send_counts(sent_offsets_.at(static_cast<std::size_t>(layer)), hidden);
  fill_recv_counts(received, hidden);
  const std::int64_t received_rows = static_cast<std::int64_t>(
      std::accumulate(recv_counts_.begin(), recv_counts_.end(), std::size_t{0}) /
      static_cast<std::size_t>(hidden));

  const Tensor arrived = scratch.allocate({received_rows, hidden}, dy_perm.dtype());
  {
    ScopedMilliseconds timer(ep_time());
    group_.all_to_all_v(dy_perm.raw_data(), send_counts_, arrived.raw_data(), recv_counts_,
                        dy_perm.dtype());
  }
  const Tensor dy_local = scratch.allocate({received_rows, hidden}, dy_perm.dtype());
  regroup(context.ops, received, arrived, dy_local, /*source_major_to_expert_major=*/true);
  const Tensor drows = scratch.allocate({received_rows, hidden}, dy_perm.dtype());
  run_local_backward(context, layer, dy_local, local, saved, drows);
  regroup(context.ops, received, drows, arrived, /*source_major_to_expert_major=*/false);
  ScopedMilliseconds timer(ep_time());
  group_.all_to_all_v(arrived.raw_data(), recv_counts_, dx_perm.raw_data(), send_counts_,
                      dx_perm.dtype());
}

}  // namespace dyncp::parallel
