#include "parallel/cp_ring_attention.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "parallel/group_bin_layout.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {

// Tags keep the forward K/V, backward K/V and backward dK/dV messages apart (MPI; NCCL
// matches by order, which every rank keeps the same).
constexpr int kForwardTag = 1;
constexpr int kBackwardTag = 3;
constexpr int kGradientTag = 5;

// Does any query of any sequence see any key of the same sequence (key position <= query
// position and, with a sliding window w > 0, fewer than w positions back)? Without a window it
// is enough to compare the smallest key with the largest query per sequence; with one, each
// query looks for the nearest key at or before it among the sequence's sorted key positions.
bool any_visible(const std::int32_t* q_cu, const std::int32_t* q_positions,
                 const std::int32_t* kv_cu, const std::int32_t* kv_positions,
                 std::int64_t sequences, std::int32_t window) {
  std::vector<std::int32_t> keys;
  for (std::int64_t s = 0; s < sequences; ++s) {
    if (q_cu[s] == q_cu[s + 1] || kv_cu[s] == kv_cu[s + 1]) continue;
    if (window <= 0) {
      const std::int32_t max_query =
          *std::max_element(q_positions + q_cu[s], q_positions + q_cu[s + 1]);
      const std::int32_t min_key =
          *std::min_element(kv_positions + kv_cu[s], kv_positions + kv_cu[s + 1]);
      if (min_key <= max_query) return true;
      continue;
    }
    keys.assign(kv_positions + kv_cu[s], kv_positions + kv_cu[s + 1]);
    std::sort(keys.begin(), keys.end());
    for (std::int32_t i = q_cu[s]; i < q_cu[s + 1]; ++i) {
      const auto after = std::upper_bound(keys.begin(), keys.end(), q_positions[i]);
      if (after != keys.begin() && std::int64_t{q_positions[i]} - *(after - 1) < window)
        return true;
    }
  }
  return false;
}

}  // namespace

int CpRingAttentionContext::source_at(int step) const {
  const int ranks = group_->size();
  return ((group_->rank() - step) % ranks + ranks) % ranks;
}

void CpRingAttentionContext::begin_bin(const model::SeamContext& context,
                                       const model::LocalBinLayout& layout) {
  count_bin(layout);
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  core::Arena& keep = *context.activations;
  // Every rank of the group holds the same bin (so every K/V block has the same shape and a
  // receive never needs resizing).
  ScopedMilliseconds timer(cp_time());
  const GroupBinLayout gathered =
      gather_group_bin_layout(*group_, context.host_arena(), layout, "CP ring attention");
  const Tensor& q_host_positions =
      layout.host_positions.defined() ? layout.host_positions : layout.positions;
  // The kernels read key positions on the device; visibility is decided on the host.
  const Tensor kv_positions = on_device_of(layout.positions, keep, gathered.positions);
  const std::int64_t ranks = gathered.ranks;
  const std::int64_t sequences = gathered.sequences;
  const Tensor& all_positions = gathered.positions;
  const Tensor& all_cu = gathered.cu_seqlens;

  layouts_.resize(static_cast<std::size_t>(ranks));
  visible_.resize(static_cast<std::size_t>(ranks));
  for (std::int64_t source = 0; source < ranks; ++source) {
    ops::VarlenAttentionLayout& block = layouts_[static_cast<std::size_t>(source)];
    block.q_cu_seqlens = layout.cu_seqlens;
    block.q_positions = layout.positions;
    block.kv_cu_seqlens = all_cu.slice(source * (sequences + 1), (source + 1) * (sequences + 1));
    block.kv_positions = kv_positions.slice(source * local_rows_, (source + 1) * local_rows_);
    block.sliding_window = layout.sliding_window;
    visible_[static_cast<std::size_t>(source)] =
        any_visible(layout.cu_seqlens.data<std::int32_t>(), q_host_positions.data<std::int32_t>(),
                    block.kv_cu_seqlens.data<std::int32_t>(),
                    all_positions.data<std::int32_t>() + source * local_rows_, sequences,
                    layout.sliding_window)
            ? 1
            : 0;
  }
}

void CpRingAttentionContext::start_pass(const Tensor& k, const Tensor& v, const Tensor& next_k,
                                        const Tensor& next_v, int tag,
                                        dist::Comm::PendingSendRecv pending[2]) {
  ScopedMilliseconds timer(cp_time());
  dist::Comm& group = *group_;
  const int next = (group.rank() + 1) % group.size();
  const int previous = source_at(1);
  const auto count = static_cast<std::size_t>(k.numel());
  pending[0] = group.start_send_recv(k.raw_data(), count, next, next_k.raw_data(), count, previous,
                                     k.dtype(), tag);
  pending[1] = group.start_send_recv(v.raw_data(), count, next, next_v.raw_data(), count, previous,
                                     v.dtype(), tag + 1);
}

void CpRingAttentionContext::wait_pass(dist::Comm::PendingSendRecv pending[2]) {
  ScopedMilliseconds timer(cp_time());
  // The compute stream waits for the blocks by events (the host goes on enqueueing); on the
  // host the transfers are waited for.
  group_->order_compute_after(pending[0]);
  group_->order_compute_after(pending[1]);
}

void CpRingAttentionContext::forward(const model::SeamContext& context, int layer, const Tensor& q,
                                     const Tensor& k, const Tensor& v, double scale,
                                     const Tensor& out, ops::AttentionSaved& saved) {
  count_layer();
  if (!distributed()) {
    local_.forward(context, layer, q, k, v, scale, out, saved);
    return;
  }
  const int ranks = group_->size();
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  // Two block slots: the one attended (and sent) and the one being received.
  const Tensor slot_k[2] = {scratch.allocate(k.shape(), k.dtype()),
                            scratch.allocate(k.shape(), k.dtype())};
  const Tensor slot_v[2] = {scratch.allocate(v.shape(), v.dtype()),
                            scratch.allocate(v.shape(), v.dtype())};
  const Tensor partial_out = scratch.allocate(out.shape(), out.dtype());
  ops::AttentionSaved partial{scratch.allocate(saved.lse.shape(), saved.lse.dtype())};

  for (int step = 0; step < ranks; ++step) {
    // Step 0 holds the local K/V itself; step i >= 1 holds slot (i - 1) % 2.
    const Tensor& held_k = step == 0 ? k : slot_k[(step - 1) % 2];
    const Tensor& held_v = step == 0 ? v : slot_v[(step - 1) % 2];
    dist::Comm::PendingSendRecv pending[2];
    const bool pass_on = step + 1 < ranks;
    if (pass_on)
      start_pass(held_k, held_v, slot_k[step % 2], slot_v[step % 2], kForwardTag, pending);
    const int source = source_at(step);
    const ops::VarlenAttentionLayout& block = layouts_[static_cast<std::size_t>(source)];
    if (step == 0) {
      ops::attention_forward(context.ops, q, held_k, held_v, block, scale, out, saved);
    } else if (visible_[static_cast<std::size_t>(source)] != 0) {
      ops::attention_forward(context.ops, q, held_k, held_v, block, scale, partial_out, partial);
      ops::attention_merge(context.ops, out, saved.lse, partial_out, partial.lse);
    }
    if (pass_on) wait_pass(pending);
  }
}

void CpRingAttentionContext::backward(const model::SeamContext& context, int layer,
                                      const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out,
                                      const ops::AttentionSaved& saved, double scale,
                                      const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (!distributed()) {
    local_.backward(context, layer, dout, q, k, v, out, saved, scale, dq, dk, dv);
    return;
  }
  ops::OpContext ops_context = context.ops;
  ops_context.scratch = context.scratch;
  dist::Comm& group = *group_;
  const int ranks = group.size();
  const int next = (group.rank() + 1) % ranks;
  const int previous = source_at(1);
  const auto count = static_cast<std::size_t>(k.numel());
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const Tensor slot_k[2] = {scratch.allocate(k.shape(), k.dtype()),
                            scratch.allocate(k.shape(), k.dtype())};
  const Tensor slot_v[2] = {scratch.allocate(v.shape(), v.dtype()),
                            scratch.allocate(v.shape(), v.dtype())};
  // dK / dV accumulators: two alternate as "being computed" and "being sent"; one receives.
  const Tensor computed_dk[2] = {scratch.allocate(k.shape(), k.dtype()),
                                 scratch.allocate(k.shape(), k.dtype())};
  const Tensor computed_dv[2] = {scratch.allocate(v.shape(), v.dtype()),
                                 scratch.allocate(v.shape(), v.dtype())};
  const Tensor incoming_dk = scratch.allocate(k.shape(), k.dtype());
  const Tensor incoming_dv = scratch.allocate(v.shape(), v.dtype());
  dist::Comm::PendingSendRecv gradients[2];
  bool gradients_pending = false;

  for (int step = 0; step < ranks; ++step) {
    const Tensor& held_k = step == 0 ? k : slot_k[(step - 1) % 2];
    const Tensor& held_v = step == 0 ? v : slot_v[(step - 1) % 2];
    dist::Comm::PendingSendRecv pending[2];
    const bool pass_on = step + 1 < ranks;
    if (pass_on)
      start_pass(held_k, held_v, slot_k[step % 2], slot_v[step % 2], kBackwardTag, pending);
    const int source = source_at(step);
    const ops::VarlenAttentionLayout& block = layouts_[static_cast<std::size_t>(source)];
    if (step == 0) {
      ops::attention_backward(ops_context, dout, q, k, v, out, saved, block, scale, dq, dk, dv);
    } else {
      const Tensor& block_dk = computed_dk[step % 2];
      const Tensor& block_dv = computed_dv[step % 2];
      if (visible_[static_cast<std::size_t>(source)] != 0) {
        ops::AttentionGradModes modes;
        modes.dq = ops::GradMode::accumulate;
        ops::attention_backward(ops_context, dout, q, held_k, held_v, out, saved, block, scale, dq,
                                block_dk, block_dv, modes);
      } else {
        block_dk.fill_zero();
        block_dv.fill_zero();
      }
      if (gradients_pending) {
        {
          ScopedMilliseconds timer(cp_time());
          group.order_compute_after(gradients[0]);
          group.order_compute_after(gradients[1]);
        }
        ops::add(context.ops, block_dk, incoming_dk, block_dk);
        ops::add(context.ops, block_dv, incoming_dv, block_dv);
      }
      // On to the next holder of this block; what arrives is the next step's block's sum (or,
      // after the last step, the other ranks' sum for this rank's own block).
      ScopedMilliseconds timer(cp_time());
      gradients[0] = group.start_send_recv(block_dk.raw_data(), count, next, incoming_dk.raw_data(),
                                           count, previous, dk.dtype(), kGradientTag);
      gradients[1] = group.start_send_recv(block_dv.raw_data(), count, next, incoming_dv.raw_data(),
                                           count, previous, dv.dtype(), kGradientTag + 1);
      gradients_pending = true;
    }
    if (pass_on) wait_pass(pending);
  }
  DYNCP_CHECK(gradients_pending, "a ring of two or more ranks sends dK/dV at least once");
  {
    ScopedMilliseconds timer(cp_time());
    group.order_compute_after(gradients[0]);
    group.order_compute_after(gradients[1]);
  }
  ops::add(context.ops, dk, incoming_dk, dk);
  ops::add(context.ops, dv, incoming_dv, dv);
}

}  // namespace dyncp::parallel
