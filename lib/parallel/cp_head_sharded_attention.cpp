#include "parallel/cp_head_sharded_attention.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

using core::Tensor;

void CpHeadShardedAttentionContext::begin_bin(const model::SeamContext& context,
                                              const model::LocalBinLayout& layout) {
  count_bin(layout);
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  ring_.begin_bin(levels_->levels(*group_, inner_size_), exchange_, context, layout,
                  "CP all-to-all attention", cp_time());
}

void CpHeadShardedAttentionContext::assign_slices(const Tensor& q, const Tensor& k) {
  const config::HeadSharding sharding{exchange_.group_size(), q.size(1), k.size(1)};
  const std::string problem =
      config::head_sharding_problem(sharding.query_heads, sharding.kv_heads, sharding.ranks);
  if (!problem.empty()) {
    core::throw_runtime_error("CP all-to-all attention: " + problem +
                              " (model.num_attention_heads / num_key_value_heads and the CP "
                              "group size; validation should have refused this layout)");
  }
  query_slices_.assign_query_side(sharding);
  kv_slices_.assign_kv_side(sharding);
}

void CpHeadShardedAttentionContext::forward(const model::SeamContext& context, int layer,
                                            const Tensor& q, const Tensor& k, const Tensor& v,
                                            double scale, const Tensor& out,
                                            ops::AttentionSaved& saved) {
  count_layer();
  if (!distributed()) {
    local_.forward(context, layer, q, k, v, scale, out, saved);
    return;
  }
  assign_slices(q, k);
  if (static_cast<std::size_t>(layer) >= layers_.size())
    layers_.resize(static_cast<std::size_t>(layer) + 1);
  LayerState& state = layers_[static_cast<std::size_t>(layer)];
  core::Arena& keep = *context.activations;
  core::Arena& scratch = *context.scratch;
  state.q = exchange_.allocate_heads(keep, q, query_slices_);
  state.k = exchange_.allocate_heads(keep, k, kv_slices_);
  state.v = exchange_.allocate_heads(keep, v, kv_slices_);
  state.out = exchange_.allocate_heads(keep, out, query_slices_);
  state.saved.lse = exchange_.allocate_heads(keep, saved.lse, query_slices_);
  exchange_.to_heads(q, query_slices_, state.q, scratch, cp_time());
  exchange_.to_heads(k, kv_slices_, state.k, scratch, cp_time());
  exchange_.to_heads(v, kv_slices_, state.v, scratch, cp_time());
  ring_.seam().forward(context, layer, state.q, state.k, state.v, scale, state.out, state.saved);
  ring_.collect(cp_time());
  exchange_.from_heads(state.out, query_slices_, out, scratch, cp_time());
  exchange_.from_heads(state.saved.lse, query_slices_, saved.lse, scratch, cp_time());
}

void CpHeadShardedAttentionContext::backward(const model::SeamContext& context, int layer,
                                             const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out,
                                             const ops::AttentionSaved& saved, double scale,
                                             const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (!distributed()) {
    local_.backward(context, layer, dout, q, k, v, out, saved, scale, dq, dk, dv);
    return;
  }
  DYNCP_CHECK(static_cast<std::size_t>(layer) < layers_.size() &&
                  layers_[static_cast<std::size_t>(layer)].q.defined(),
              "CP all-to-all attention: backward of a layer whose forward did not run");
  assign_slices(q, k);
  const LayerState& state = layers_[static_cast<std::size_t>(layer)];
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const Tensor dout_heads = exchange_.allocate_heads(scratch, dout, query_slices_);
  const Tensor dq_heads = exchange_.allocate_heads(scratch, dq, query_slices_);
  const Tensor dk_heads = exchange_.allocate_heads(scratch, dk, kv_slices_);
  const Tensor dv_heads = exchange_.allocate_heads(scratch, dv, kv_slices_);
  exchange_.to_heads(dout, query_slices_, dout_heads, scratch, cp_time());
  ring_.seam().backward(context, layer, dout_heads, state.q, state.k, state.v, state.out,
                        state.saved, scale, dq_heads, dk_heads, dv_heads);
  ring_.collect(cp_time());
  exchange_.from_heads(dq_heads, query_slices_, dq, scratch, cp_time());
  exchange_.from_heads(dk_heads, kv_slices_, dk, scratch, cp_time());
  exchange_.from_heads(dv_heads, kv_slices_, dv, scratch, cp_time());
}

}  // namespace dyncp::parallel
