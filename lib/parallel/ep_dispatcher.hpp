#pragma once
// Expert parallelism: the experts of each MoE layer are split over the EP group (consecutive
// pool ranks, static, unrelated to the CP layout of the microbatch). EP rank j owns experts
// [j * E/ep, (j+1) * E/ep).
//
// Forward, per layer (rows arrive grouped by global expert, so each destination's rows are one
// contiguous block):
//   1. all_to_all of the per-expert row counts (ep x E/ep counts per rank)
//   2. all_to_all_v of the rows to the ranks owning their experts
//   3. regroup the received rows from (source rank, expert) order to (expert, source rank)
//      order and run the local experts (model::run_experts_forward)
//   4. regroup the outputs back and all_to_all_v them home, in the order they came.
// Backward mirrors it: dY goes to the experts' owners, dX comes back; expert weight gradients
// stay on the owning rank and are later summed over the expert-data-parallel group. The model
// holds only the owned experts (parallel::local_expert_range).
// With model.moe_shared_expert_overlap the layer hands its shared expert to forward_beside,
// which runs it while step 2's rows travel (the same numbers: it reads none of them).
// A one-rank EP group runs the experts locally without communication. Expert offsets in device
// memory (model.moe_grouped_gemm) come down to the host once per layer's forward, the one
// synchronisation of an EP MoE layer: the all-to-all sizes its messages from them.

#include <memory>
#include <vector>

#include "dist/comm.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/expert_tensor_parallel.hpp"

namespace dyncp::parallel {

class EpExpertDispatcher final : public model::ExpertDispatcher {
 public:
  // `expert_tensor_parallel`: the experts' columns are split over that group (etp > 1), which
  // runs the local experts on every rank's rows (expert_tensor_parallel.hpp).
  EpExpertDispatcher(dist::Comm& expert_parallel_group, std::int64_t num_experts,
                     std::int64_t num_layers, SeamCounters* counters = nullptr,
                     dist::Comm* expert_tensor_parallel = nullptr);

  std::int64_t first_local_expert() const { return first_local_expert_; }
  std::int64_t num_local_experts() const { return num_local_experts_; }

  void forward(const model::SeamContext& context, int layer, const core::Tensor& x_perm,
               const core::Tensor& expert_offsets, const model::ExpertWeights& weights,
               const core::Tensor& y_perm, model::ExpertSaved& saved) override;
  // Step 2's all_to_all_v is started, `beside` runs (the shared expert on the compute
  // stream), then the regrouping waits for the rows (device: by an event; host: MPI's wait).
  void forward_beside(const model::SeamContext& context, int layer, const core::Tensor& x_perm,
                      const core::Tensor& expert_offsets, const model::ExpertWeights& weights,
                      const core::Tensor& y_perm, model::ExpertSaved& saved,
                      const std::function<void()>& beside) override;
  void backward(const model::SeamContext& context, int layer, const core::Tensor& dy_perm,
                const core::Tensor& expert_offsets, const model::ExpertWeights& weights,
                const model::ExpertSaved& saved, const core::Tensor& dx_perm) override;
  // Across ranks the rows are sent and received copies; x_perm is only the send buffer.
  bool keeps_x_perm() const override { return group_.size() == 1 && !expert_tensor_parallel_; }

 private:
  // Throws unless `weights` are exactly this rank's experts (the model holds only its slice).
  void check_local(const model::ExpertWeights& weights) const;
  // send_counts_ (elements per destination) from the global expert offsets.
  void fill_send_counts(const core::Tensor& expert_offsets, std::int64_t row_elements);
  // recv_counts_ (elements per source) from the received per-(source, expert) row counts.
  void fill_recv_counts(const core::Tensor& received_expert_rows, std::int64_t row_elements);
  // Moves row blocks between (source, expert) order and (expert, source) order, converting
  // each block (ops::convert on ctx) where `from` and `to` differ in dtype (bf16 activations).
  void regroup(const ops::OpContext& ctx, const core::Tensor& received_expert_rows,
               const core::Tensor& from, const core::Tensor& to, bool source_major_to_expert_major);
  double& ep_time() { return counters_ != nullptr ? counters_->ep_comm_ms : unreported_ms_; }
  // The local experts on rows grouped by local expert: here, or over the expert-TP group.
  void run_local_forward(const model::SeamContext& context, int layer, const core::Tensor& rows,
                         const core::Tensor& offsets, const core::Tensor& host_offsets,
                         const model::ExpertWeights& weights, const core::Tensor& y,
                         model::ExpertSaved& saved);
  void run_local_backward(const model::SeamContext& context, int layer, const core::Tensor& dy,
                          const model::ExpertWeights& weights, const model::ExpertSaved& saved,
                          const core::Tensor& drows);

  dist::Comm& group_;
  std::int64_t num_experts_;
  std::int64_t num_local_experts_;
  std::int64_t first_local_expert_;
  SeamCounters* counters_;
  double unreported_ms_ = 0;
  std::vector<std::int64_t> sent_rows_;  // this rank's rows per global expert
  std::vector<std::size_t> send_counts_;
  std::vector<std::size_t> recv_counts_;
  std::vector<std::int64_t> source_cursor_;
  std::vector<core::Tensor> received_expert_rows_;  // per layer: i64 [ep, E/ep]
  std::vector<core::Tensor> sent_offsets_;          // per layer: host i64 [E + 1]
  std::unique_ptr<ExpertTensorParallel> expert_tensor_parallel_;
};

}  // namespace dyncp::parallel
