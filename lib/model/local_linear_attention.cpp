// LocalLinearAttentionContext (local_seams.hpp): the sequence-level part of a Gated DeltaNet
// layer when every sequence of the bin is whole on this rank.
#include <cmath>

#include "model/local_seams.hpp"
#include "ops/causal_conv1d.hpp"

namespace dyncp::model {

using core::DType;

namespace {

// Rows of the [conv_dim, K] weight for the q, k and v channels.
struct ConvWeightRows {
  Tensor q, k, v;
};

ConvWeightRows conv_rows(const LinearAttentionDims& dims, const Tensor& weight) {
  const std::int64_t key_dim = dims.key_heads * dims.key_head_dim;
  if (!weight.defined()) return {};
  return {weight.slice(0, key_dim), weight.slice(key_dim, 2 * key_dim),
          weight.slice(2 * key_dim, weight.size(0))};
}

Tensor flat(const Tensor& t) {
  return t.reshape({t.size(0), t.numel() / t.size(0)});
}

}  // namespace

void LocalLinearAttentionContext::begin_bin(const SeamContext&, const LocalBinLayout& layout) {
  cu_seqlens_ = layout.cu_seqlens;
}

void LocalLinearAttentionContext::forward(const SeamContext& context, int,
                                          const LinearAttentionDims& dims, const Tensor& q_raw,
                                          const Tensor& k_raw, const Tensor& v_raw,
                                          const Tensor& conv_weight, const Tensor& g,
                                          const Tensor& beta, const Tensor& out,
                                          LinearAttentionSaved& saved) {
  core::Arena& keep = *context.activations;
  const ops::OpContext& ctx = context.ops;
  const std::int64_t tokens = q_raw.size(0);
  const DType dtype = q_raw.dtype();
  const ConvWeightRows weight = conv_rows(dims, conv_weight);

  saved.q = keep.allocate(q_raw.shape(), dtype);
  saved.k = keep.allocate(k_raw.shape(), dtype);
  saved.v = keep.allocate(v_raw.shape(), dtype);
  ops::causal_conv1d_silu_forward(ctx, flat(q_raw), weight.q, cu_seqlens_, flat(saved.q));
  ops::causal_conv1d_silu_forward(ctx, flat(k_raw), weight.k, cu_seqlens_, flat(saved.k));
  ops::causal_conv1d_silu_forward(ctx, flat(v_raw), weight.v, cu_seqlens_, flat(saved.v));
  saved.q_norm.inv_norm = keep.allocate({tokens * dims.key_heads}, dtype);
  saved.k_norm.inv_norm = keep.allocate({tokens * dims.key_heads}, dtype);
  ops::l2norm_forward(ctx, saved.q, linear_attention_l2norm_eps, saved.q, saved.q_norm);
  ops::l2norm_forward(ctx, saved.k, linear_attention_l2norm_eps, saved.k, saved.k_norm);

  const ops::GatedDeltaRuleParams params = dims.rule_params();
  saved.rule.chunk_states =
      keep.allocate({ops::gated_delta_rule_num_chunks(cu_seqlens_, params.chunk_size),
                     dims.value_heads, dims.key_head_dim, dims.value_head_dim},
                    dtype);
  const ops::GatedDeltaRuleInputs inputs{saved.q, saved.k, saved.v, g, beta, cu_seqlens_, {}};
  ops::gated_delta_rule_chunked_forward(ctx, inputs, params, out, {}, saved.rule);
}

void LocalLinearAttentionContext::backward(
    const SeamContext& context, int, const LinearAttentionDims& dims, const Tensor& dout,
    const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw, const Tensor& conv_weight,
    const Tensor& g, const Tensor& beta, const LinearAttentionSaved& saved, const Tensor& dq_raw,
    const Tensor& dk_raw, const Tensor& dv_raw, const Tensor& dconv_weight, const Tensor& dg,
    const Tensor& dbeta) {
  core::Arena& scratch = *context.scratch;
  core::ArenaScope temporaries(scratch);
  const ops::OpContext& ctx = context.ops;
  const DType dtype = dout.dtype();
  const Tensor dq = scratch.allocate(saved.q.shape(), dtype);
  const Tensor dk = scratch.allocate(saved.k.shape(), dtype);
  const Tensor dv = scratch.allocate(saved.v.shape(), dtype);
  const ops::GatedDeltaRuleInputs inputs{saved.q, saved.k, saved.v, g, beta, cu_seqlens_, {}};
  ops::gated_delta_rule_chunked_backward(ctx, dout, {}, inputs, dims.rule_params(), saved.rule,
                                         {dq, dk, dv, dg, dbeta, {}});
  ops::l2norm_backward(ctx, dq, saved.q, saved.q_norm, dq);
  ops::l2norm_backward(ctx, dk, saved.k, saved.k_norm, dk);
  const ConvWeightRows weight = conv_rows(dims, conv_weight);
  const ConvWeightRows dweight = conv_rows(dims, dconv_weight);
  ops::causal_conv1d_silu_backward(ctx, flat(dq), flat(q_raw), weight.q, cu_seqlens_, flat(dq_raw),
                                   dweight.q);
  ops::causal_conv1d_silu_backward(ctx, flat(dk), flat(k_raw), weight.k, cu_seqlens_, flat(dk_raw),
                                   dweight.k);
  ops::causal_conv1d_silu_backward(ctx, flat(dv), flat(v_raw), weight.v, cu_seqlens_, flat(dv_raw),
                                   dweight.v);
}

}  // namespace dyncp::model
