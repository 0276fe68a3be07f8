#include "parallel/cp_attention.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "parallel/group_bin_layout.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

void CpAttentionContext::begin_bin(const model::SeamContext& context,
                                   const model::LocalBinLayout& layout) {
  DYNCP_CHECK(!prefetched_, "CP attention: a backward's K / V gather was started and never used");
  count_bin(layout);
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  layout_.q_cu_seqlens = layout.cu_seqlens;
  layout_.q_positions = layout.positions;
  // Positions are global, so the window needs nothing from the gathered key order.
  layout_.sliding_window = layout.sliding_window;

  core::Arena& keep = *context.activations;
  core::Arena& host = context.host_arena();
  ScopedMilliseconds timer(cp_time());
  const GroupBinLayout gathered = gather_group_bin_layout(*group_, host, layout, "CP attention");
  const std::int64_t ranks = gathered.ranks;
  const std::int64_t sequences = gathered.sequences;
  const Tensor& all_positions = gathered.positions;
  const Tensor& all_cu = gathered.cu_seqlens;

  // Keys of sequence s: rank 0's rows of s, then rank 1's, ...
  // Planned on the host; the kernels read only the key positions on the device.
  layout_.kv_cu_seqlens = host.allocate({sequences + 1}, DType::i32);
  const Tensor host_kv_positions = host.allocate({ranks * local_rows_}, DType::i32);
  sequence_to_rank_row_ = host.allocate({ranks * local_rows_}, DType::i32);
  const std::int32_t* cu = all_cu.data<std::int32_t>();
  const std::int32_t* positions = all_positions.data<std::int32_t>();
  std::int32_t* kv_cu = layout_.kv_cu_seqlens.data<std::int32_t>();
  std::int32_t* kv_positions = host_kv_positions.data<std::int32_t>();
  std::int32_t* order = sequence_to_rank_row_.data<std::int32_t>();
  std::int32_t next = 0;
  kv_cu[0] = 0;
  for (std::int64_t s = 0; s < sequences; ++s) {
    for (std::int64_t r = 0; r < ranks; ++r) {
      const std::int32_t* rank_cu = cu + r * (sequences + 1);
      for (std::int32_t row = rank_cu[s]; row < rank_cu[s + 1]; ++row) {
        const auto gathered_row = static_cast<std::int32_t>(r * local_rows_ + row);
        order[next] = gathered_row;
        kv_positions[next] = positions[gathered_row];
        ++next;
      }
    }
    kv_cu[s + 1] = next;
  }
  DYNCP_CHECK(next == ranks * local_rows_, "every gathered row belongs to one sequence");
  layout_.kv_positions = on_device_of(layout.positions, keep, host_kv_positions);
}

void CpAttentionContext::scatter_rank_order(const Tensor& sequence_order,
                                            const Tensor& rank_order) {
  scatter_rows(sequence_order, rank_order, sequence_to_rank_row_.data<std::int32_t>());
}

CpAttentionContext::KvInFlight CpAttentionContext::start_kv_gather(core::Arena& scratch,
                                                                   const Tensor& k, const Tensor& v,
                                                                   int layer) {
  const core::Shape kv_shape{group_->size() * local_rows_, k.size(1), k.size(2)};
  KvInFlight in_flight{scratch.allocate(kv_shape, k.dtype()),
                       scratch.allocate(kv_shape, k.dtype()),
                       scratch.allocate(kv_shape, k.dtype()),
                       {},
                       {},
                       layer};
  ScopedMilliseconds timer(cp_time());
  in_flight.k_pending = group_->start_all_gather(k.raw_data(), static_cast<std::size_t>(k.numel()),
                                                 in_flight.k_staging.raw_data(), k.dtype());
  in_flight.v_pending = group_->start_all_gather(v.raw_data(), static_cast<std::size_t>(v.numel()),
                                                 in_flight.v_staging.raw_data(), v.dtype());
  return in_flight;
}

CpAttentionContext::GatheredKv CpAttentionContext::finish_kv_gather(KvInFlight& in_flight) {
  const std::int32_t* order = sequence_to_rank_row_.data<std::int32_t>();
  {
    ScopedMilliseconds timer(cp_time());
    group_->order_compute_after(in_flight.k_pending);
  }
  gather_rows(in_flight.k_staging, in_flight.k, order);  // while V may still travel
  {
    ScopedMilliseconds timer(cp_time());
    group_->order_compute_after(in_flight.v_pending);
  }
  // V into sequence order in K's freed staging; V's staging is free afterwards.
  gather_rows(in_flight.v_staging, in_flight.k_staging, order);
  return {in_flight.v_staging, in_flight.k, in_flight.k_staging};
}

void CpAttentionContext::prepare_backward(const model::SeamContext& context, int layer,
                                          const Tensor& k, const Tensor& v) {
  if (!distributed()) return;
  prefetched_ = start_kv_gather(*context.scratch, k, v, layer);
}

void CpAttentionContext::forward(const model::SeamContext& context, int layer, const Tensor& q,
                                 const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                                 ops::AttentionSaved& saved) {
  count_layer();
  if (!distributed()) {
    local_.forward(context, layer, q, k, v, scale, out, saved);
    return;
  }
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  KvInFlight in_flight = start_kv_gather(scratch, k, v, layer);
  const GatheredKv gathered = finish_kv_gather(in_flight);
  ops::attention_forward(context.ops, q, gathered.k, gathered.v, layout_, scale, out, saved);
}

void CpAttentionContext::backward(const model::SeamContext& context, int layer, const Tensor& dout,
                                  const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const ops::AttentionSaved& saved, double scale,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (!distributed()) {
    local_.backward(context, layer, dout, q, k, v, out, saved, scale, dq, dk, dv);
    return;
  }
  ops::OpContext ops_context = context.ops;
  ops_context.scratch = context.scratch;
  core::Arena& scratch = *context.scratch;
  // Started in prepare_backward (its buffers sit below this scope), or now.
  std::optional<KvInFlight> in_flight = std::exchange(prefetched_, std::nullopt);
  if (in_flight && in_flight->layer != layer) {
    core::throw_runtime_error("CP attention: layer " + std::to_string(layer) +
                              "'s backward after layer " + std::to_string(in_flight->layer) +
                              "'s prepare_backward");
  }
  core::ArenaScope scope(scratch);
  if (!in_flight) in_flight = start_kv_gather(scratch, k, v, layer);
  const GatheredKv gathered = finish_kv_gather(*in_flight);
  const Tensor& rank_order = gathered.rank_order;
  const Tensor& gathered_k = gathered.k;
  const Tensor& gathered_v = gathered.v;

  const Tensor gathered_dk = scratch.allocate(gathered_k.shape(), k.dtype());
  const Tensor gathered_dv = scratch.allocate(gathered_k.shape(), k.dtype());
  ops::attention_backward(ops_context, dout, q, gathered_k, gathered_v, out, saved, layout_, scale,
                          dq, gathered_dk, gathered_dv);

  // Back to rank order, then each rank receives the group's sum for its own rows.
  scatter_rank_order(gathered_dk, rank_order);
  {
    ScopedMilliseconds timer(cp_time());
    group_->reduce_scatter(rank_order.raw_data(), dk.raw_data(),
                           static_cast<std::size_t>(dk.numel()), dk.dtype(), dist::ReduceOp::sum);
  }
  scatter_rank_order(gathered_dv, rank_order);
  {
    ScopedMilliseconds timer(cp_time());
    group_->reduce_scatter(rank_order.raw_data(), dv.raw_data(),
                           static_cast<std::size_t>(dv.numel()), dv.dtype(), dist::ReduceOp::sum);
  }
}

}  // namespace dyncp::parallel
