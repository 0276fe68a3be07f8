#include "ops/gated_delta_rule_common.hpp"

#include <algorithm>
#include <string>

#include "ops/cu_seqlens_check.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops::detail {
namespace {

Shape state_shape(const GatedDeltaRuleDims& dims) {
  return Shape{dims.sequences, dims.value_heads, dims.key_dim, dims.value_dim};
}

}  // namespace

GatedDeltaRuleDims check_gated_delta_rule_inputs(std::string_view op, const OpContext& ctx,
                                                 const GatedDeltaRuleInputs& in,
                                                 const GatedDeltaRuleParams& params, bool chunked) {
  require_float_operands_on_any_device(op, ctx,
                                       {{"q", &in.q},
                                        {"k", &in.k},
                                        {"v", &in.v},
                                        {"g", &in.g},
                                        {"beta", &in.beta},
                                        {"initial_state", &in.initial_state}});
  require_rank(op, "q", in.q, 3);
  require_rank(op, "v", in.v, 3);
  require_shape(op, "k", in.k, in.q.shape());
  GatedDeltaRuleDims dims;
  dims.tokens = in.q.size(0);
  dims.key_heads = in.q.size(1);
  dims.key_dim = in.q.size(2);
  dims.value_heads = in.v.size(1);
  dims.value_dim = in.v.size(2);
  if (in.v.size(0) != dims.tokens) {
    fail(op, "v " + in.v.describe() + " must have as many tokens as q " + in.q.describe());
  }
  if (dims.key_heads < 1 || dims.value_heads % dims.key_heads != 0) {
    fail(op, "the value heads of v " + in.v.describe() +
                 " must be a positive multiple of the key heads of q " + in.q.describe());
  }
  if (dims.key_dim < 1 || dims.value_dim < 1) {
    fail(op, "head dims must be positive: q " + in.q.describe() + ", v " + in.v.describe());
  }
  dims.heads_per_key = dims.value_heads / dims.key_heads;
  require_shape(op, "g", in.g, Shape{dims.tokens, dims.value_heads});
  require_shape(op, "beta", in.beta, Shape{dims.tokens, dims.value_heads});
  dims.sequences = check_cu_seqlens(op, "cu_seqlens", in.cu_seqlens, dims.tokens);
  const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
  for (std::int64_t s = 0; s < dims.sequences; ++s)
    dims.max_sequence_length = std::max<std::int64_t>(dims.max_sequence_length, cu[s + 1] - cu[s]);
  if (in.initial_state.defined())
    require_shape(op, "initial_state", in.initial_state, state_shape(dims));
  if (chunked && params.chunk_size < 1) {
    fail(op, "chunk_size must be >= 1, got " + std::to_string(params.chunk_size));
  }
  require_scratch(op, ctx);
  return dims;
}

void check_gated_delta_rule_outputs(std::string_view op, const OpContext& ctx,
                                    const GatedDeltaRuleInputs& in, const GatedDeltaRuleDims& dims,
                                    const Tensor& out, const Tensor& final_state) {
  require_float_operands_on_any_device(
      op, ctx, {{"q", &in.q}, {"out", &out}, {"final_state", &final_state}});
  require_shape(op, "out", out, Shape{dims.tokens, dims.value_heads, dims.value_dim});
  for (const Tensor* input : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
    if (out.numel() > 0 && out.raw_data() == input->raw_data())
      fail(op, "out must not alias an input");
  }
  if (final_state.defined()) require_shape(op, "final_state", final_state, state_shape(dims));
}

void check_gated_delta_rule_grads(std::string_view op, const OpContext& ctx,
                                  const GatedDeltaRuleInputs& in, const GatedDeltaRuleDims& dims,
                                  const Tensor& dout, const Tensor& d_final_state,
                                  const GatedDeltaRuleGrads& grads) {
  require_float_operands_on_any_device(op, ctx,
                                       {{"q", &in.q},
                                        {"dout", &dout},
                                        {"d_final_state", &d_final_state},
                                        {"grads.dq", &grads.dq},
                                        {"grads.dk", &grads.dk},
                                        {"grads.dv", &grads.dv},
                                        {"grads.dg", &grads.dg},
                                        {"grads.dbeta", &grads.dbeta},
                                        {"grads.d_initial_state", &grads.d_initial_state}});
  require_shape(op, "dout", dout, Shape{dims.tokens, dims.value_heads, dims.value_dim});
  if (d_final_state.defined()) require_shape(op, "d_final_state", d_final_state, state_shape(dims));
  const int defined = int(grads.dq.defined()) + int(grads.dk.defined()) + int(grads.dv.defined()) +
                      int(grads.dg.defined()) + int(grads.dbeta.defined());
  if (defined != 0 && defined != 5) {
    fail(op, "grads.dq, dk, dv, dg and dbeta must be all defined or all undefined");
  }
  if (defined == 5) {
    require_shape(op, "grads.dq", grads.dq, in.q.shape());
    require_shape(op, "grads.dk", grads.dk, in.k.shape());
    require_shape(op, "grads.dv", grads.dv, in.v.shape());
    require_shape(op, "grads.dg", grads.dg, in.g.shape());
    require_shape(op, "grads.dbeta", grads.dbeta, in.beta.shape());
  }
  if (grads.d_initial_state.defined())
    require_shape(op, "grads.d_initial_state", grads.d_initial_state, state_shape(dims));
}

}  // namespace dyncp::ops::detail
