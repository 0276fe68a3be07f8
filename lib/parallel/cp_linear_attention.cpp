#include "parallel/cp_linear_attention.hpp"

namespace dyncp::parallel {

using core::Tensor;

void CpLinearAttentionContext::begin_bin(const model::SeamContext& context,
                                         const model::LocalBinLayout& layout) {
  if (!distributed()) {
    local_.begin_bin(context, layout);
    return;
  }
  {
    ScopedMilliseconds timer(cp_time());
    gather_.begin_bin(*group_, *context.activations, layout);
  }
  local_.begin_bin(context, gather_.whole_layout());
}

Tensor CpLinearAttentionContext::whole_like(core::Arena& arena, const Tensor& local) const {
  core::Shape shape = local.shape();
  shape[0] = gather_.whole_rows();
  return arena.allocate(shape, local.dtype());
}

CpLinearAttentionContext::WholeInputs CpLinearAttentionContext::gather_inputs(
    core::Arena& arena, const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
    const Tensor& g, const Tensor& beta) {
  WholeInputs whole{whole_like(arena, q_raw), whole_like(arena, k_raw), whole_like(arena, v_raw),
                    whole_like(arena, g), whole_like(arena, beta)};
  gather_.gather(q_raw, whole.q_raw, arena, cp_time());
  gather_.gather(k_raw, whole.k_raw, arena, cp_time());
  gather_.gather(v_raw, whole.v_raw, arena, cp_time());
  gather_.gather(g, whole.g, arena, cp_time());
  gather_.gather(beta, whole.beta, arena, cp_time());
  return whole;
}

void CpLinearAttentionContext::forward(const model::SeamContext& context, int layer,
                                       const model::LinearAttentionDims& dims, const Tensor& q_raw,
                                       const Tensor& k_raw, const Tensor& v_raw,
                                       const Tensor& conv_weight, const Tensor& g,
                                       const Tensor& beta, const Tensor& out,
                                       model::LinearAttentionSaved& saved) {
  if (!distributed()) {
    local_.forward(context, layer, dims, q_raw, k_raw, v_raw, conv_weight, g, beta, out, saved);
    return;
  }
  // The whole inputs are temporaries; what backward needs is in `saved` (whole-sequence
  // tensors from the activation arena, written by the local implementation).
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const WholeInputs whole = gather_inputs(scratch, q_raw, k_raw, v_raw, g, beta);
  const Tensor whole_out = whole_like(scratch, out);
  local_.forward(context, layer, dims, whole.q_raw, whole.k_raw, whole.v_raw, conv_weight, whole.g,
                 whole.beta, whole_out, saved);
  gather_.keep_own(whole_out, out);
}

void CpLinearAttentionContext::backward(
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
  core::Arena& scratch = *context.scratch;
  core::ArenaScope scope(scratch);
  const WholeInputs whole = gather_inputs(scratch, q_raw, k_raw, v_raw, g, beta);
  const Tensor whole_dout = whole_like(scratch, dout);
  gather_.gather(dout, whole_dout, scratch, cp_time());
  const WholeInputs grads{whole_like(scratch, dq_raw), whole_like(scratch, dk_raw),
                          whole_like(scratch, dv_raw), whole_like(scratch, dg),
                          whole_like(scratch, dbeta)};
  // Every rank of the group computes the same whole-sequence weight gradient: one adds it.
  const Tensor weight_grad = group_->rank() == 0 ? dconv_weight : Tensor{};
  local_.backward(context, layer, dims, whole_dout, whole.q_raw, whole.k_raw, whole.v_raw,
                  conv_weight, whole.g, whole.beta, saved, grads.q_raw, grads.k_raw, grads.v_raw,
                  weight_grad, grads.g, grads.beta);
  gather_.keep_own(grads.q_raw, dq_raw);
  gather_.keep_own(grads.k_raw, dk_raw);
  gather_.keep_own(grads.v_raw, dv_raw);
  gather_.keep_own(grads.g, dg);
  gather_.keep_own(grads.beta, dbeta);
}

}  // namespace dyncp::parallel
