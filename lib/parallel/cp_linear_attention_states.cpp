#include "parallel/cp_linear_attention_states.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "ops/causal_conv1d.hpp"
#include "ops/elementwise.hpp"
#include "ops/segment_states.hpp"
#include "parallel/group_bin_layout.hpp"
#include "parallel/row_copy.hpp"
#include "parallel/segment_states.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {

// A tensor as [rows, row elements].
Tensor by_rows(const Tensor& t) {
  return t.reshape({t.size(0), t.shape().row_numel()});
}

// dst row dst_row += src row src_row (same row width), where the tensors live.
void add_row(const ops::OpContext& ctx, const Tensor& src, std::int64_t src_row, const Tensor& dst,
             std::int64_t dst_row) {
  const Tensor to = dst.slice(dst_row, dst_row + 1);
  ops::add(ctx, to, src.slice(src_row, src_row + 1), to);
}

// [T, C] with the conv's channel order q | k | v, one row per token.
Tensor pack_channels(const ops::OpContext& ctx, core::Arena& arena, const Tensor& q,
                     const Tensor& k, const Tensor& v) {
  const std::int64_t qw = q.shape().row_numel(), kw = k.shape().row_numel(),
                     vw = v.shape().row_numel();
  const Tensor packed = arena.allocate({q.size(0), qw + kw + vw}, q.dtype());
  ops::copy_columns(ctx, by_rows(q), 0, packed, 0, qw);
  ops::copy_columns(ctx, by_rows(k), 0, packed, qw, kw);
  ops::copy_columns(ctx, by_rows(v), 0, packed, qw + kw, vw);
  return packed;
}

void unpack_channels(const ops::OpContext& ctx, const Tensor& packed, const Tensor& q,
                     const Tensor& k, const Tensor& v) {
  const std::int64_t qw = q.shape().row_numel(), kw = k.shape().row_numel(),
                     vw = v.shape().row_numel();
  ops::copy_columns(ctx, packed, 0, by_rows(q), 0, qw);
  ops::copy_columns(ctx, packed, qw, by_rows(k), 0, kw);
  ops::copy_columns(ctx, packed, qw + kw, by_rows(v), 0, vw);
}

}  // namespace

void CpStatePassingLinearAttentionContext::begin_bin(const model::SeamContext& context,
                                                     const model::LocalBinLayout& layout) {
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  GroupBinLayout gathered;
  {
    ScopedMilliseconds timer(cp_time());
    gathered =
        gather_group_bin_layout(*group_, context.host_arena(), layout, "DeltaNet state passing");
  }
  local_rows_ = gathered.local_rows;
  segments_.clear();
  rank_first_.assign(static_cast<std::size_t>(gathered.ranks + 1), 0);
  chains_.assign(static_cast<std::size_t>(gathered.sequences), {});
  for (std::int64_t r = 0; r < gathered.ranks; ++r) {
    rank_first_[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(segments_.size());
    const std::int32_t* positions = gathered.positions_of(r).data<std::int32_t>();
    const std::int32_t* cu = gathered.cu_seqlens_of(r).data<std::int32_t>();
    for (std::int64_t s = 0; s < gathered.sequences; ++s) {
      for (std::int32_t row = cu[s]; row < cu[s + 1]; ++row) {
        if (row == cu[s] || positions[row] != positions[row - 1] + 1) {
          segments_.push_back({static_cast<int>(r), s, row, 0, positions[row]});
        }
        ++segments_.back().length;
      }
    }
  }
  rank_first_.back() = static_cast<std::int64_t>(segments_.size());
  for (std::size_t g = 0; g < segments_.size(); ++g) {
    chains_[static_cast<std::size_t>(segments_[g].sequence)].push_back(
        static_cast<std::int64_t>(g));
  }
  for (std::size_t s = 0; s < chains_.size(); ++s) {
    std::vector<std::int64_t>& chain = chains_[s];
    std::sort(chain.begin(), chain.end(), [&](std::int64_t a, std::int64_t b) {
      return segments_[static_cast<std::size_t>(a)].first_position <
             segments_[static_cast<std::size_t>(b)].first_position;
    });
    std::int64_t expected = 0;
    for (const std::int64_t g : chain) {
      const Segment& segment = segments_[static_cast<std::size_t>(g)];
      if (segment.first_position != expected) {
        core::throw_runtime_error(
            "DeltaNet state passing: sequence " + std::to_string(s) + " of the bin on group '" +
            group_->name() + "' does not hold every position exactly once (group rank " +
            std::to_string(segment.rank) + " holds a run starting at position " +
            std::to_string(segment.first_position) + ", expected " + std::to_string(expected) +
            ")");
      }
      expected += segment.length;
    }
  }
  const std::int64_t first = rank_first_[static_cast<std::size_t>(group_->rank())];
  const std::int64_t end = rank_first_[static_cast<std::size_t>(group_->rank() + 1)];
  own_cu_ = context.host_arena().allocate({end - first + 1}, DType::i32);
  std::int32_t* own_cu = own_cu_.data<std::int32_t>();
  for (std::int64_t g = first; g < end; ++g) {
    own_cu[g - first] =
        static_cast<std::int32_t>(segments_[static_cast<std::size_t>(g)].local_begin);
  }
  own_cu[end - first] = static_cast<std::int32_t>(local_rows_);
  halo_ = HaloPlan{};
  layers_.clear();
}

const CpStatePassingLinearAttentionContext::HaloPlan&
CpStatePassingLinearAttentionContext::halo_plan(std::int64_t kernel) {
  if (halo_.kernel == kernel) return halo_;
  HaloPlan plan;
  plan.kernel = kernel;
  const std::size_t count = segments_.size();
  plan.tail_offset.resize(count);
  plan.tail_length.resize(count);
  plan.tail_elements.assign(static_cast<std::size_t>(group_->size()), 0);
  for (std::size_t g = 0; g < count; ++g) {
    const std::int64_t length = std::min(kernel - 1, segments_[g].length);
    plan.tail_offset[g] = plan.tail_rows;
    plan.tail_length[g] = length;
    plan.tail_rows += length;
    plan.tail_elements[static_cast<std::size_t>(segments_[g].rank)] +=
        static_cast<std::size_t>(length);
  }
  // The K − 1 rows before a segment are each within the last K − 1 rows of the segment
  // holding them (that segment ends at or before this one starts), so the tails hold every
  // halo row, also when it reaches back over several short segments.
  const std::int64_t first = rank_first_[static_cast<std::size_t>(group_->rank())];
  const std::int64_t end = rank_first_[static_cast<std::size_t>(group_->rank() + 1)];
  plan.window_cu.push_back(0);
  for (std::int64_t g = first; g < end; ++g) {
    const Segment& segment = segments_[static_cast<std::size_t>(g)];
    const std::vector<std::int64_t>& chain = chains_[static_cast<std::size_t>(segment.sequence)];
    const std::int64_t halo = std::min(kernel - 1, segment.first_position);
    std::size_t holder = 0;
    for (std::int64_t p = segment.first_position - halo; p < segment.first_position; ++p) {
      while (true) {
        const Segment& candidate = segments_[static_cast<std::size_t>(chain[holder])];
        if (p < candidate.first_position + candidate.length) break;
        ++holder;
      }
      const auto h = static_cast<std::size_t>(chain[holder]);
      const Segment& source = segments_[h];
      plan.halo_source.push_back(plan.tail_offset[h] + p -
                                 (source.first_position + source.length - plan.tail_length[h]));
    }
    plan.window_cu.push_back(
        static_cast<std::int32_t>(plan.window_cu.back() + halo + segment.length));
  }
  halo_ = std::move(plan);
  return halo_;
}

void CpStatePassingLinearAttentionContext::forward(
    const model::SeamContext& context, int layer, const model::LinearAttentionDims& dims,
    const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw, const Tensor& conv_weight,
    const Tensor& g, const Tensor& beta, const Tensor& out, model::LinearAttentionSaved& saved) {
  if (!distributed()) {
    local_.forward(context, layer, dims, q_raw, k_raw, v_raw, conv_weight, g, beta, out, saved);
    return;
  }
  DYNCP_CHECK(q_raw.size(0) == local_rows_, "DeltaNet state passing: rows do not match the bin");
  core::Arena& keep = *context.activations;
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const ops::OpContext& ctx = context.ops;
  const DType dtype = q_raw.dtype();
  const std::int64_t tokens = local_rows_;
  const std::int64_t channels = conv_weight.size(0);
  const std::int64_t first = rank_first_[static_cast<std::size_t>(group_->rank())];
  const std::int64_t end = rank_first_[static_cast<std::size_t>(group_->rank() + 1)];
  const std::int64_t own = end - first;
  const auto segment_count = static_cast<std::int64_t>(segments_.size());
  const HaloPlan& plan = halo_plan(conv_weight.size(1));
  if (static_cast<std::size_t>(layer) >= layers_.size()) {
    layers_.resize(static_cast<std::size_t>(layer) + 1);
  }
  LayerState& state = layers_[static_cast<std::size_t>(layer)];

  // Conv halo: every segment's tail, then this rank's halo rows out of them.
  const Tensor raw = pack_channels(ctx, scratch, q_raw, k_raw, v_raw);
  DYNCP_CHECK(raw.size(1) == channels, "DeltaNet state passing: conv weight channels");
  const auto my_rank = static_cast<std::size_t>(group_->rank());
  const Tensor tails_mine =
      scratch.allocate({static_cast<std::int64_t>(plan.tail_elements[my_rank]), channels}, dtype);
  std::int64_t tail_row = 0;
  for (std::int64_t s = first; s < end; ++s) {
    const Segment& segment = segments_[static_cast<std::size_t>(s)];
    const std::int64_t length = plan.tail_length[static_cast<std::size_t>(s)];
    copy_rows(raw, segment.local_begin + segment.length - length, tails_mine, tail_row, length);
    tail_row += length;
  }
  const Tensor tails = scratch.allocate({plan.tail_rows, channels}, dtype);
  std::vector<std::size_t> counts(plan.tail_elements);
  for (std::size_t& c : counts) c *= static_cast<std::size_t>(channels);
  {
    ScopedMilliseconds timer(cp_time());
    group_->all_gather_v(tails_mine.raw_data(), counts[my_rank], tails.raw_data(), counts, dtype);
  }
  state.halo = keep.allocate({static_cast<std::int64_t>(plan.halo_source.size()), channels}, dtype);
  for (std::size_t i = 0; i < plan.halo_source.size(); ++i) {
    copy_rows(tails, plan.halo_source[i], state.halo, static_cast<std::int64_t>(i), 1);
  }

  // Conv + SiLU over [halo | own rows] of every own segment; keep the own outputs.
  const Tensor window = scratch.allocate({plan.window_cu.back(), channels}, dtype);
  const Tensor window_cu =
      Tensor::view_of(const_cast<std::int32_t*>(plan.window_cu.data()),
                      {static_cast<std::int64_t>(plan.window_cu.size())}, DType::i32);
  {
    std::int64_t halo_row = 0;
    for (std::int64_t i = 0; i < own; ++i) {
      const Segment& segment = segments_[static_cast<std::size_t>(first + i)];
      const std::int64_t halo = plan.window_cu[static_cast<std::size_t>(i + 1)] -
                                plan.window_cu[static_cast<std::size_t>(i)] - segment.length;
      copy_rows(state.halo, halo_row, window, plan.window_cu[static_cast<std::size_t>(i)], halo);
      copy_rows(raw, segment.local_begin, window,
                plan.window_cu[static_cast<std::size_t>(i)] + halo, segment.length);
      halo_row += halo;
    }
  }
  const Tensor window_out = scratch.allocate(window.shape(), dtype);
  if (window.size(0) > 0) {
    ops::causal_conv1d_silu_forward(ctx, window, conv_weight, window_cu, window_out);
  }
  const Tensor mixed = scratch.allocate(raw.shape(), dtype);
  for (std::int64_t i = 0; i < own; ++i) {
    const Segment& segment = segments_[static_cast<std::size_t>(first + i)];
    copy_rows(window_out, plan.window_cu[static_cast<std::size_t>(i + 1)] - segment.length, mixed,
              segment.local_begin, segment.length);
  }
  saved.q = keep.allocate(q_raw.shape(), dtype);
  saved.k = keep.allocate(k_raw.shape(), dtype);
  saved.v = keep.allocate(v_raw.shape(), dtype);
  unpack_channels(ctx, mixed, saved.q, saved.k, saved.v);
  saved.q_norm.inv_norm = keep.allocate({tokens * dims.key_heads}, dtype);
  saved.k_norm.inv_norm = keep.allocate({tokens * dims.key_heads}, dtype);
  ops::l2norm_forward(ctx, saved.q, model::linear_attention_l2norm_eps, saved.q, saved.q_norm);
  ops::l2norm_forward(ctx, saved.k, model::linear_attention_l2norm_eps, saved.k, saved.k_norm);

  // [F | P] of the own segments: v extended by dk zero columns, initial state [0 | I].
  const std::int64_t heads = dims.value_heads, dk = dims.key_head_dim, dv = dims.value_head_dim;
  const std::int64_t width = dv + dk;
  const ops::GatedDeltaRuleParams params = dims.rule_params();
  const Tensor v_wide = scratch.zeros({tokens, heads, width}, dtype);
  const Tensor start_wide = scratch.zeros({own, heads, dk, width}, dtype);
  const Tensor end_wide = scratch.allocate({own, heads, dk, width}, dtype);
  ops::copy_columns(ctx, saved.v.reshape({tokens * heads, dv}), 0,
                    v_wide.reshape({tokens * heads, width}), 0, dv);
  ops::set_identity_columns(ctx, start_wide.reshape({own * heads, dk, width}), dv);
  // The out columns beyond dv are w_t = P_tᵀ (scale · q_t), P_t the transition from the
  // segment's start through token t: out_t = out_t|_{S_in=0} + S_inᵀ w_t, so backward gets
  // dL/dS_in of the own outputs as Σ_t w_t dout_tᵀ without another pass.
  state.query_maps = keep.allocate({tokens, heads, dk}, dtype);
  if (tokens > 0) {
    const Tensor out_wide = scratch.allocate({tokens, heads, width}, dtype);
    ops::GatedDeltaRuleSaved unsaved;
    ops::gated_delta_rule_chunked_forward(ctx,
                                          {saved.q, saved.k, v_wide, g, beta, own_cu_, start_wide},
                                          params, out_wide, end_wide, unsaved);
    ops::copy_columns(ctx, out_wide.reshape({tokens * heads, width}), dv,
                      state.query_maps.reshape({tokens * heads, dk}), 0, dk);
  }
  state.transitions = keep.allocate({segment_count, heads, dk, width}, dtype);
  {
    std::vector<std::size_t> state_counts(static_cast<std::size_t>(group_->size()));
    for (std::size_t r = 0; r < state_counts.size(); ++r) {
      state_counts[r] =
          static_cast<std::size_t>((rank_first_[r + 1] - rank_first_[r]) * heads * dk * width);
    }
    ScopedMilliseconds timer(cp_time());
    group_->all_gather_v(end_wide.raw_data(), state_counts[my_rank], state.transitions.raw_data(),
                         state_counts, dtype);
  }
  state.initial_states = keep.allocate({own, heads, dk, dv}, dtype);
  compose_incoming_states(ctx, context.host_arena(), state.transitions, chains_, first, end,
                          state.initial_states);

  // The own segments from their true incoming states.
  saved.rule.chunk_states = keep.allocate(
      {ops::gated_delta_rule_num_chunks(own_cu_, params.chunk_size), heads, dk, dv}, dtype);
  if (tokens > 0) {
    ops::gated_delta_rule_chunked_forward(
        ctx, {saved.q, saved.k, saved.v, g, beta, own_cu_, state.initial_states}, params, out, {},
        saved.rule);
  }
  recurrence_rows_ += tokens;
}

void CpStatePassingLinearAttentionContext::backward(
    const model::SeamContext& context, int layer, const model::LinearAttentionDims& dims,
    const Tensor& dout, const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
    const Tensor& conv_weight, const Tensor& g, const Tensor& beta,
    const model::LinearAttentionSaved& saved, const Tensor& dq_raw, const Tensor& dk_raw,
    const Tensor& dv_raw, const Tensor& dconv_weight, const Tensor& dg, const Tensor& dbeta) {
  if (!distributed()) {
    local_.backward(context, layer, dims, dout, q_raw, k_raw, v_raw, conv_weight, g, beta, saved,
                    dq_raw, dk_raw, dv_raw, dconv_weight, dg, dbeta);
    return;
  }
  DYNCP_CHECK(static_cast<std::size_t>(layer) < layers_.size() &&
                  layers_[static_cast<std::size_t>(layer)].transitions.defined(),
              "DeltaNet state passing: backward of a layer without forward in this bin");
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const ops::OpContext& ctx = context.ops;
  const DType dtype = dout.dtype();
  const LayerState& state = layers_[static_cast<std::size_t>(layer)];
  const std::int64_t tokens = local_rows_;
  const std::int64_t channels = conv_weight.size(0);
  const std::int64_t first = rank_first_[static_cast<std::size_t>(group_->rank())];
  const std::int64_t end = rank_first_[static_cast<std::size_t>(group_->rank() + 1)];
  const std::int64_t own = end - first;
  const auto segment_count = static_cast<std::int64_t>(segments_.size());
  const auto my_rank = static_cast<std::size_t>(group_->rank());
  const std::int64_t heads = dims.value_heads, dk = dims.key_head_dim, dv = dims.value_head_dim;
  const ops::GatedDeltaRuleParams params = dims.rule_params();
  const ops::GatedDeltaRuleInputs inputs{
      saved.q, saved.k, saved.v, g, beta, own_cu_, state.initial_states};

  // G: what the own outputs alone send back into each own segment's incoming state.
  const Tensor state_grad_mine = scratch.allocate({own, heads, dk, dv}, dtype);
  own_state_grads(ctx, state.query_maps, dout, own_cu_, state_grad_mine);
  const Tensor state_grads = scratch.allocate({segment_count, heads, dk, dv}, dtype);
  {
    std::vector<std::size_t> state_counts(static_cast<std::size_t>(group_->size()));
    for (std::size_t r = 0; r < state_counts.size(); ++r) {
      state_counts[r] =
          static_cast<std::size_t>((rank_first_[r + 1] - rank_first_[r]) * heads * dk * dv);
    }
    ScopedMilliseconds timer(cp_time());
    group_->all_gather_v(state_grad_mine.raw_data(), state_counts[my_rank], state_grads.raw_data(),
                         state_counts, dtype);
  }
  const Tensor final_grads = scratch.allocate({own, heads, dk, dv}, dtype);
  compose_final_state_grads(ctx, context.host_arena(), state.transitions, state_grads, chains_,
                            first, end, final_grads);
  const Tensor dq = scratch.allocate(saved.q.shape(), dtype);
  const Tensor dk_t = scratch.allocate(saved.k.shape(), dtype);
  const Tensor dv_t = scratch.allocate(saved.v.shape(), dtype);
  if (tokens > 0) {
    ops::gated_delta_rule_chunked_backward(ctx, dout, final_grads, inputs, params, saved.rule,
                                           {dq, dk_t, dv_t, dg, dbeta, {}});
  }
  ops::l2norm_backward(ctx, dq, saved.q, saved.q_norm, dq);
  ops::l2norm_backward(ctx, dk_t, saved.k, saved.k_norm, dk_t);

  // Conv backward over the same windows, zero output gradient on the halo rows.
  const HaloPlan& plan = halo_plan(conv_weight.size(1));
  const Tensor raw = pack_channels(ctx, scratch, q_raw, k_raw, v_raw);
  const Tensor mixed_grad = pack_channels(ctx, scratch, dq, dk_t, dv_t);
  const Tensor window = scratch.allocate({plan.window_cu.back(), channels}, dtype);
  const Tensor window_grad = scratch.zeros(window.shape(), dtype);
  const Tensor window_cu =
      Tensor::view_of(const_cast<std::int32_t*>(plan.window_cu.data()),
                      {static_cast<std::int64_t>(plan.window_cu.size())}, DType::i32);
  {
    std::int64_t halo_row = 0;
    for (std::int64_t i = 0; i < own; ++i) {
      const Segment& segment = segments_[static_cast<std::size_t>(first + i)];
      const std::int64_t start = plan.window_cu[static_cast<std::size_t>(i)];
      const std::int64_t halo =
          plan.window_cu[static_cast<std::size_t>(i + 1)] - start - segment.length;
      copy_rows(state.halo, halo_row, window, start, halo);
      copy_rows(raw, segment.local_begin, window, start + halo, segment.length);
      copy_rows(mixed_grad, segment.local_begin, window_grad, start + halo, segment.length);
      halo_row += halo;
    }
  }
  const Tensor window_input_grad = scratch.allocate(window.shape(), dtype);
  if (window.size(0) > 0) {
    ops::causal_conv1d_silu_backward(ctx, window_grad, window, conv_weight, window_cu,
                                     window_input_grad, dconv_weight);
  }
  // Own rows' input gradients from the own windows, plus what the other ranks' windows send
  // back to this rank's tails.
  const Tensor raw_grad = scratch.allocate(raw.shape(), dtype);
  const Tensor tail_grads = scratch.zeros({plan.tail_rows, channels}, dtype);
  {
    std::int64_t halo_row = 0;
    for (std::int64_t i = 0; i < own; ++i) {
      const Segment& segment = segments_[static_cast<std::size_t>(first + i)];
      const std::int64_t start = plan.window_cu[static_cast<std::size_t>(i)];
      const std::int64_t halo =
          plan.window_cu[static_cast<std::size_t>(i + 1)] - start - segment.length;
      for (std::int64_t j = 0; j < halo; ++j) {
        add_row(ctx, window_input_grad, start + j, tail_grads,
                plan.halo_source[static_cast<std::size_t>(halo_row + j)]);
      }
      copy_rows(window_input_grad, start + halo, raw_grad, segment.local_begin, segment.length);
      halo_row += halo;
    }
  }
  {
    ScopedMilliseconds timer(cp_time());
    group_->all_reduce(tail_grads.raw_data(), tail_grads.raw_data(),
                       static_cast<std::size_t>(tail_grads.numel()), dtype, dist::ReduceOp::sum);
  }
  for (std::int64_t s = first; s < end; ++s) {
    const Segment& segment = segments_[static_cast<std::size_t>(s)];
    const std::int64_t length = plan.tail_length[static_cast<std::size_t>(s)];
    for (std::int64_t j = 0; j < length; ++j) {
      add_row(ctx, tail_grads, plan.tail_offset[static_cast<std::size_t>(s)] + j, raw_grad,
              segment.local_begin + segment.length - length + j);
    }
  }
  unpack_channels(ctx, raw_grad, dq_raw, dk_raw, dv_raw);
}

}  // namespace dyncp::parallel
