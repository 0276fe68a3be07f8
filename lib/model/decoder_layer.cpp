#include "model/decoder_layer.hpp"

#include <cmath>

#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/rope.hpp"
#include "ops/swiglu.hpp"

namespace dyncp::model {

namespace {

using core::DType;
using ops::GradMode;
using ops::RmsNormVariant;

struct Dims {
  std::int64_t tokens, hidden, q_heads, kv_heads, head_dim, experts, top_k;
};

Dims dims_of(const LayerRunContext& run, const Tensor& input) {
  const auto& a = *run.architecture;
  return {input.size(0), a.hidden_size, a.num_attention_heads, a.num_key_value_heads,
          a.head_dim,    a.num_experts, a.num_experts_per_tok};
}

ops::RopeParams rope_of(const config::ModelArchitecture& a) {
  return {a.rope_theta, static_cast<int>(a.rotary_dim())};
}

double attention_scale(const config::ModelArchitecture& a) {
  return 1.0 / std::sqrt(static_cast<double>(a.head_dim));
}

// Attention block: fills the attention part of `saved` and `saved.mid` = input + attention.
void attention_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                       const Tensor& input, DecoderLayerActivations& saved) {
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  core::Arena& keep = *run.seam.activations;
  const ops::OpContext& ctx = run.seam.ops;
  const double eps = a.rms_norm_eps;

  saved.normed_input = keep.allocate({n.tokens, n.hidden}, DType::f32);
  saved.input_norm.inv_rms = keep.allocate({n.tokens}, DType::f32);
  ops::rmsnorm_forward(ctx, input, params.input_norm.value, eps, RmsNormVariant::plain,
                       saved.normed_input, saved.input_norm);

  const auto project_normed = [&](const Param& proj, const Param& norm, std::int64_t heads,
                                  Tensor& raw, ops::RmsNormSaved& norm_saved, Tensor& out) {
    raw = keep.allocate({n.tokens, heads, n.head_dim}, DType::f32);
    ops::linear_forward(ctx, saved.normed_input, proj.value,
                        raw.reshape({n.tokens, heads * n.head_dim}));
    out = keep.allocate({n.tokens, heads, n.head_dim}, DType::f32);
    norm_saved.inv_rms = keep.allocate({n.tokens * heads}, DType::f32);
    ops::rmsnorm_forward(ctx, raw, norm.value, eps, RmsNormVariant::plain, out, norm_saved);
    ops::rope_forward(ctx, out, run.positions, rope_of(a), out);
  };
  project_normed(params.attention.q_proj, params.attention.q_norm, n.q_heads, saved.q_raw,
                 saved.q_norm, saved.q);
  project_normed(params.attention.k_proj, params.attention.k_norm, n.kv_heads, saved.k_raw,
                 saved.k_norm, saved.k);
  saved.v = keep.allocate({n.tokens, n.kv_heads, n.head_dim}, DType::f32);
  ops::linear_forward(ctx, saved.normed_input, params.attention.v_proj.value,
                      saved.v.reshape({n.tokens, n.kv_heads * n.head_dim}));

  saved.attention_out = keep.allocate({n.tokens, n.q_heads, n.head_dim}, DType::f32);
  saved.attention.lse = keep.allocate({n.tokens, n.q_heads}, DType::f32);
  run.seams.attention->forward(run.seam, layer, saved.q, saved.k, saved.v, attention_scale(a),
                               saved.attention_out, saved.attention);

  saved.mid = keep.allocate({n.tokens, n.hidden}, DType::f32);
  saved.mid.copy_from(input);
  ops::gemm(ctx, saved.attention_out.reshape({n.tokens, n.q_heads * n.head_dim}),
            ops::Transpose::no, params.attention.o_proj.value, ops::Transpose::yes, saved.mid, 1.0,
            /*accumulate=*/true);
}

// Router, aux-loss statistics, permutation and experts; writes the un-permuted, weighted
// expert output to `mlp_out` [T, h]. Returns the layer's aux loss.
double moe_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                   DecoderLayerActivations& saved, const Tensor& mlp_out) {
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, saved.normed_mid);
  core::Arena& keep = *run.seam.activations;
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  const int top_k = static_cast<int>(n.top_k);

  saved.router.probs = keep.allocate({n.tokens, n.experts}, DType::f32);
  saved.expert_ids = keep.allocate({n.tokens, n.top_k}, DType::i32);
  saved.routing_weights = keep.allocate({n.tokens, n.top_k}, DType::f32);
  {
    core::ArenaScope temporaries(scratch);
    const Tensor logits = scratch.allocate({n.tokens, n.experts}, DType::f32);
    ops::linear_forward(ctx, saved.normed_mid, params.moe.router.value, logits);
    ops::router_forward(ctx, logits, top_k, a.norm_topk_prob, saved.expert_ids,
                        saved.routing_weights, saved.router);
  }

  double aux_loss = 0.0;
  if (run.aux_loss != ops::MoeAuxLossType::none) {
    const std::int64_t sequences = run.cu_seqlens.numel() - 1;
    saved.aux_grad_coeff = keep.allocate({sequences, n.experts}, DType::f32);
    core::ArenaScope temporaries(scratch);
    const Tensor counts = scratch.allocate({sequences, n.experts}, DType::f32);
    const Tensor prob_sums = scratch.allocate({sequences, n.experts}, DType::f32);
    ops::moe_aux_loss_statistics(ctx, saved.router.probs, saved.expert_ids, run.cu_seqlens,
                                 run.token_is_real, counts, prob_sums);
    run.seams.statistics->reduce(run.seam, counts, prob_sums);
    aux_loss = ops::moe_aux_loss_finish(ctx, counts, prob_sums, top_k, a.router_aux_loss_coef,
                                        run.aux_num_sequences_global, saved.aux_grad_coeff);
  }

  const std::int64_t assignments = n.tokens * n.top_k;
  saved.plan.expert_order = keep.allocate({assignments}, DType::i32);
  saved.plan.assignment_row = keep.allocate({assignments}, DType::i32);
  saved.plan.expert_offsets = keep.allocate({n.experts + 1}, DType::i64);
  saved.plan.tokens_per_expert = keep.allocate({n.experts}, DType::i64);
  ops::build_permute_plan(ctx, saved.expert_ids, static_cast<int>(n.experts), saved.plan);

  // x_perm is only an input of the expert computation; the dispatcher keeps what it needs.
  const Tensor x_perm = keep.allocate({assignments, n.hidden}, DType::f32);
  ops::permute_forward(ctx, saved.normed_mid, saved.plan, x_perm);
  saved.y_perm = keep.allocate({assignments, n.hidden}, DType::f32);
  run.seams.experts->forward(run.seam, layer, x_perm, saved.plan.expert_offsets, params.moe.experts,
                             saved.y_perm, saved.experts);
  ops::unpermute_forward(ctx, saved.y_perm, saved.plan, saved.routing_weights, mlp_out);
  return aux_loss;
}

void dense_mlp_forward(const LayerRunContext& run, const DecoderLayerParams& params,
                       DecoderLayerActivations& saved, const Tensor& mlp_out) {
  const std::int64_t tokens = saved.normed_mid.size(0);
  const std::int64_t twice_intermediate = params.dense.gate_up.value.size(0);
  core::Arena& keep = *run.seam.activations;
  saved.dense_gate_up = keep.allocate({tokens, twice_intermediate}, DType::f32);
  saved.dense_hidden = keep.allocate({tokens, twice_intermediate / 2}, DType::f32);
  ops::linear_forward(run.seam.ops, saved.normed_mid, params.dense.gate_up.value,
                      saved.dense_gate_up);
  ops::swiglu_fused_forward(run.seam.ops, saved.dense_gate_up, saved.dense_hidden);
  ops::linear_forward(run.seam.ops, saved.dense_hidden, params.dense.down.value, mlp_out);
}

}  // namespace

double decoder_layer_forward(const LayerRunContext& run, int layer_index,
                             const DecoderLayerParams& params, const Tensor& input,
                             DecoderLayerActivations& saved, const Tensor& output) {
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  attention_forward(run, layer_index, params, input, saved);

  core::Arena& keep = *run.seam.activations;
  saved.normed_mid = keep.allocate({n.tokens, n.hidden}, DType::f32);
  saved.post_attention_norm.inv_rms = keep.allocate({n.tokens}, DType::f32);
  ops::rmsnorm_forward(run.seam.ops, saved.mid, params.post_attention_norm.value, a.rms_norm_eps,
                       RmsNormVariant::plain, saved.normed_mid, saved.post_attention_norm);
  // The MLP writes straight into `output`, then the residual is added in place.
  double aux_loss = 0.0;
  if (params.is_moe) {
    aux_loss = moe_forward(run, layer_index, params, saved, output);
  } else {
    dense_mlp_forward(run, params, saved, output);
  }
  ops::add(run.seam.ops, output, saved.mid, output);
  return aux_loss;
}

void decoder_layer_backward(const LayerRunContext& run, int layer_index,
                            const DecoderLayerParams& params, const Tensor& input,
                            const DecoderLayerActivations& saved, const Tensor& grad) {
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  core::ArenaScope temporaries(scratch);

  // MLP block: grad is d(output) = d(mid) through the residual, plus the MLP path below.
  const Tensor dnormed_mid = scratch.allocate({n.tokens, n.hidden}, DType::f32);
  if (params.is_moe) {
    const std::int64_t assignments = n.tokens * n.top_k;
    core::ArenaScope moe_temporaries(scratch);
    const Tensor dy_perm = scratch.allocate({assignments, n.hidden}, DType::f32);
    const Tensor dweights = scratch.allocate({n.tokens, n.top_k}, DType::f32);
    ops::unpermute_backward(ctx, grad, saved.y_perm, saved.plan, saved.routing_weights, dy_perm,
                            dweights);
    const Tensor dx_perm = scratch.allocate({assignments, n.hidden}, DType::f32);
    run.seams.experts->backward(run.seam, layer_index, dy_perm, saved.plan.expert_offsets,
                                params.moe.experts, saved.experts, dx_perm);
    ops::permute_backward(ctx, dx_perm, saved.plan, dnormed_mid);
    const Tensor dlogits = scratch.allocate({n.tokens, n.experts}, DType::f32);
    ops::router_backward(ctx, dweights, saved.expert_ids, saved.routing_weights, saved.router,
                         a.norm_topk_prob, dlogits);
    if (run.aux_loss != ops::MoeAuxLossType::none) {
      ops::moe_aux_loss_backward(ctx, saved.router.probs, run.cu_seqlens, run.token_is_real,
                                 saved.aux_grad_coeff, dlogits, run.aux_loss_grad_scale);
    }
    ops::linear_backward(ctx, dlogits, saved.normed_mid, params.moe.router.value, dnormed_mid,
                         params.moe.router.grad, GradMode::accumulate);
  } else {
    core::ArenaScope dense_temporaries(scratch);
    const Tensor dhidden = scratch.allocate(saved.dense_hidden.shape(), DType::f32);
    const Tensor dgate_up = scratch.allocate(saved.dense_gate_up.shape(), DType::f32);
    ops::linear_backward(ctx, grad, saved.dense_hidden, params.dense.down.value, dhidden,
                         params.dense.down.grad);
    ops::swiglu_fused_backward(ctx, dhidden, saved.dense_gate_up, dgate_up);
    ops::linear_backward(ctx, dgate_up, saved.normed_mid, params.dense.gate_up.value, dnormed_mid,
                         params.dense.gate_up.grad);
  }
  ops::rmsnorm_backward(ctx, dnormed_mid, saved.mid, params.post_attention_norm.value,
                        RmsNormVariant::plain, saved.post_attention_norm, grad,
                        params.post_attention_norm.grad, GradMode::accumulate);

  // Attention block: grad is now d(mid) = d(input) through the residual plus the path below.
  const Tensor dattention = scratch.allocate(saved.attention_out.shape(), DType::f32);
  ops::linear_backward(ctx, grad, saved.attention_out.reshape({n.tokens, n.q_heads * n.head_dim}),
                       params.attention.o_proj.value,
                       dattention.reshape({n.tokens, n.q_heads * n.head_dim}),
                       params.attention.o_proj.grad);
  const Tensor dq = scratch.allocate(saved.q.shape(), DType::f32);
  const Tensor dk = scratch.allocate(saved.k.shape(), DType::f32);
  const Tensor dv = scratch.allocate(saved.v.shape(), DType::f32);
  run.seams.attention->backward(run.seam, layer_index, dattention, saved.q, saved.k, saved.v,
                                saved.attention_out, saved.attention, attention_scale(a), dq, dk,
                                dv);

  const Tensor dnormed_input = dnormed_mid;  // free again: reuse its memory
  const auto projection_backward = [&](const Tensor& dprojected, const Tensor& raw,
                                       const Param& norm, const ops::RmsNormSaved& norm_saved,
                                       const Param& proj, GradMode mode) {
    ops::rope_backward(ctx, dprojected, run.positions, rope_of(a), dprojected);
    core::ArenaScope projection_temporaries(scratch);
    const Tensor draw = scratch.allocate(raw.shape(), DType::f32);
    ops::rmsnorm_backward(ctx, dprojected, raw, norm.value, RmsNormVariant::plain, norm_saved, draw,
                          norm.grad);
    ops::linear_backward(ctx, draw.reshape({n.tokens, raw.size(1) * n.head_dim}),
                         saved.normed_input, proj.value, dnormed_input, proj.grad, mode);
  };
  projection_backward(dq, saved.q_raw, params.attention.q_norm, saved.q_norm,
                      params.attention.q_proj, GradMode::overwrite);
  projection_backward(dk, saved.k_raw, params.attention.k_norm, saved.k_norm,
                      params.attention.k_proj, GradMode::accumulate);
  ops::linear_backward(ctx, dv.reshape({n.tokens, n.kv_heads * n.head_dim}), saved.normed_input,
                       params.attention.v_proj.value, dnormed_input, params.attention.v_proj.grad,
                       GradMode::accumulate);
  ops::rmsnorm_backward(ctx, dnormed_input, input, params.input_norm.value, RmsNormVariant::plain,
                        saved.input_norm, grad, params.input_norm.grad, GradMode::accumulate);
}

}  // namespace dyncp::model
