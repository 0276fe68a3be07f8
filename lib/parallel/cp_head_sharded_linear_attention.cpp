#include "parallel/cp_head_sharded_linear_attention.hpp"

#include <string>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace dyncp::parallel {

using core::Tensor;

void CpHeadShardedLinearAttentionContext::begin_bin(const model::SeamContext& context,
                                                    const model::LocalBinLayout& layout) {
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  states_.begin_bin(levels_->levels(*group_, inner_size_), exchange_, context, layout,
                    "DeltaNet all-to-all", cp_time());
}

void CpHeadShardedLinearAttentionContext::plan(const model::LinearAttentionDims& dims) {
  const config::HeadSharding sharding{exchange_.group_size(), dims.value_heads, dims.key_heads};
  const std::string problem =
      config::head_sharding_problem(sharding.query_heads, sharding.kv_heads, sharding.ranks);
  if (!problem.empty()) {
    core::throw_runtime_error("DeltaNet all-to-all: " + problem +
                              " (model.linear_num_value_heads / linear_num_key_heads and the CP "
                              "group size; validation should have refused this layout)");
  }
  value_slices_.assign_query_side(sharding);
  key_slices_.assign_kv_side(sharding);
  local_dims_ = dims;
  local_dims_.key_heads = key_slices_.heads_per_rank;
  local_dims_.value_heads = value_slices_.heads_per_rank;
  const std::int64_t rank = exchange_.group_rank();
  const std::int64_t key_dim = dims.key_heads * dims.key_head_dim;
  const std::int64_t local_key_dim = local_dims_.key_heads * dims.key_head_dim;
  const std::int64_t first_key = key_slices_.first_head[static_cast<std::size_t>(rank)];
  const std::int64_t first_value = value_slices_.first_head[static_cast<std::size_t>(rank)];
  channel_rows_[0] = {first_key * dims.key_head_dim, local_key_dim, 0};
  channel_rows_[1] = {key_dim + first_key * dims.key_head_dim, local_key_dim, local_key_dim};
  channel_rows_[2] = {2 * key_dim + first_value * dims.value_head_dim,
                      local_dims_.value_heads * dims.value_head_dim, 2 * local_key_dim};
  local_channels_ = 2 * local_key_dim + local_dims_.value_heads * dims.value_head_dim;
}

void CpHeadShardedLinearAttentionContext::forward(
    const model::SeamContext& context, int layer, const model::LinearAttentionDims& dims,
    const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw, const Tensor& conv_weight,
    const Tensor& g, const Tensor& beta, const Tensor& out, model::LinearAttentionSaved& saved) {
  if (!distributed()) {
    local_.forward(context, layer, dims, q_raw, k_raw, v_raw, conv_weight, g, beta, out, saved);
    return;
  }
  plan(dims);
  if (static_cast<std::size_t>(layer) >= layers_.size())
    layers_.resize(static_cast<std::size_t>(layer) + 1);
  LayerState& state = layers_[static_cast<std::size_t>(layer)];
  core::Arena& keep = *context.activations;
  core::Arena& scratch = *context.scratch;
  state.q_raw = exchange_.allocate_heads(keep, q_raw, key_slices_);
  state.k_raw = exchange_.allocate_heads(keep, k_raw, key_slices_);
  state.v_raw = exchange_.allocate_heads(keep, v_raw, value_slices_);
  state.g = exchange_.allocate_heads(keep, g, value_slices_);
  state.beta = exchange_.allocate_heads(keep, beta, value_slices_);
  state.conv_weight = keep.allocate({local_channels_, conv_weight.size(1)}, conv_weight.dtype());
  for (const ChannelRows& rows : channel_rows_) {
    state.conv_weight.slice(rows.local_begin, rows.local_begin + rows.count)
        .copy_from(conv_weight.slice(rows.begin, rows.begin + rows.count));
  }
  exchange_.to_heads(q_raw, key_slices_, state.q_raw, scratch, cp_time());
  exchange_.to_heads(k_raw, key_slices_, state.k_raw, scratch, cp_time());
  exchange_.to_heads(v_raw, value_slices_, state.v_raw, scratch, cp_time());
  exchange_.to_heads(g, value_slices_, state.g, scratch, cp_time());
  exchange_.to_heads(beta, value_slices_, state.beta, scratch, cp_time());
  core::ArenaScope scope(scratch);
  const Tensor out_heads = exchange_.allocate_heads(scratch, out, value_slices_);
  states_.seam().forward(context, layer, local_dims_, state.q_raw, state.k_raw, state.v_raw,
                         state.conv_weight, state.g, state.beta, out_heads, saved);
  states_.collect(cp_time());
  exchange_.from_heads(out_heads, value_slices_, out, scratch, cp_time());
}

void CpHeadShardedLinearAttentionContext::backward(
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
                  layers_[static_cast<std::size_t>(layer)].q_raw.defined(),
              "DeltaNet all-to-all: backward of a layer whose forward did not run");
  plan(dims);
  const LayerState& state = layers_[static_cast<std::size_t>(layer)];
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const Tensor dout_heads = exchange_.allocate_heads(scratch, dout, value_slices_);
  exchange_.to_heads(dout, value_slices_, dout_heads, scratch, cp_time());
  const Tensor dq_heads = exchange_.allocate_heads(scratch, dq_raw, key_slices_);
  const Tensor dk_heads = exchange_.allocate_heads(scratch, dk_raw, key_slices_);
  const Tensor dv_heads = exchange_.allocate_heads(scratch, dv_raw, value_slices_);
  const Tensor dg_heads = exchange_.allocate_heads(scratch, dg, value_slices_);
  const Tensor dbeta_heads = exchange_.allocate_heads(scratch, dbeta, value_slices_);
  Tensor dconv_local;
  if (dconv_weight.defined()) {
    dconv_local = scratch.allocate(state.conv_weight.shape(), dconv_weight.dtype());
    dconv_local.fill_zero();
  }
  states_.seam().backward(context, layer, local_dims_, dout_heads, state.q_raw, state.k_raw,
                          state.v_raw, state.conv_weight, state.g, state.beta, saved, dq_heads,
                          dk_heads, dv_heads, dconv_local, dg_heads, dbeta_heads);
  states_.collect(cp_time());
  exchange_.from_heads(dq_heads, key_slices_, dq_raw, scratch, cp_time());
  exchange_.from_heads(dk_heads, key_slices_, dk_raw, scratch, cp_time());
  exchange_.from_heads(dv_heads, value_slices_, dv_raw, scratch, cp_time());
  exchange_.from_heads(dg_heads, value_slices_, dg, scratch, cp_time());
  exchange_.from_heads(dbeta_heads, value_slices_, dbeta, scratch, cp_time());
  if (dconv_weight.defined()) {
    for (const ChannelRows& rows : channel_rows_) {
      const Tensor target = dconv_weight.slice(rows.begin, rows.begin + rows.count);
      ops::add(context.ops, target,
               dconv_local.slice(rows.local_begin, rows.local_begin + rows.count), target);
    }
  }
}

}  // namespace dyncp::parallel
