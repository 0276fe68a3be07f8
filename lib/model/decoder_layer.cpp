#include "model/decoder_layer.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/rope.hpp"
#include "ops/sigmoid_gate.hpp"
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

// The router's logits decide the top-k experts of every token, so they are computed in fp32
// also under bf16 products (Megatron's moe_router_dtype: fp32, the setting of the Qwen3-Next
// and Qwen3.5 recipes): bf16 noise on the logits themselves would flip near-tied expert choices
// far more often than the noise the bf16 products upstream leave on the router's input.
ops::OpContext router_context(const ops::OpContext& ctx) {
  ops::OpContext router = ctx;
  router.precision = ops::ComputePrecision::fp32;
  return router;
}

// config.json's RoPE as the op runs it (dynamic: the sequence length is set per sequence).
ops::RopeParams rope_of(const config::ModelArchitecture& a) {
  const config::RopeScalingFields& f = a.rope_scaling;
  ops::RopeScaling scaling;
  if (f.rope_type == "linear") scaling.type = ops::RopeScalingType::linear;
  if (f.rope_type == "yarn") scaling.type = ops::RopeScalingType::yarn;
  if (f.rope_type == "llama3") scaling.type = ops::RopeScalingType::llama3;
  if (f.rope_type == "dynamic") scaling.type = ops::RopeScalingType::dynamic;
  scaling.max_position_embeddings = static_cast<double>(a.max_position_embeddings);
  if (scaling.type != ops::RopeScalingType::none) {
    scaling.factor = f.factor;
    scaling.original_max_position_embeddings = f.original_max_position_embeddings;
    scaling.beta_fast = f.beta_fast;
    scaling.beta_slow = f.beta_slow;
    scaling.truncate = f.truncate;
    scaling.attention_factor = f.attention_factor;
    scaling.mscale = f.mscale;
    scaling.mscale_all_dim = f.mscale_all_dim;
    scaling.low_freq_factor = f.low_freq_factor;
    scaling.high_freq_factor = f.high_freq_factor;
  }
  return {a.rope_theta, static_cast<int>(a.rotary_dim()), static_cast<int>(a.rope_frequency_dim()),
          scaling};
}

// RoPE on x [T, heads, d] in place (forward, or the inverse rotation of backward). Dynamic RoPE
// gives each sequence longer than max_position_embeddings its own frequencies, as transformers
// computes them for that sequence alone; a sequence's rows are contiguous in the bin.
void apply_rope(const LayerRunContext& run, const Tensor& x, bool inverse) {
  const ops::OpContext& ctx = run.seam.ops;
  ops::RopeParams params = rope_of(*run.architecture);
  const auto rotate = [&](const Tensor& rows, const Tensor& positions) {
    if (inverse) {
      ops::rope_backward(ctx, rows, positions, params, rows);
    } else {
      ops::rope_forward(ctx, rows, positions, params, rows);
    }
  };
  const auto context = static_cast<std::int64_t>(params.scaling.max_position_embeddings);
  const bool per_sequence = params.scaling.type == ops::RopeScalingType::dynamic &&
                            std::any_of(run.sequence_lengths.begin(), run.sequence_lengths.end(),
                                        [&](std::int64_t length) { return length > context; });
  if (!per_sequence) return rotate(x, run.positions);
  const std::int32_t* cu = run.cu_seqlens.data<std::int32_t>();
  for (std::size_t s = 0; s < run.sequence_lengths.size(); ++s) {
    if (cu[s] == cu[s + 1]) continue;
    params.scaling.sequence_length = run.sequence_lengths[s];
    rotate(x.slice(cu[s], cu[s + 1]), run.positions.slice(cu[s], cu[s + 1]));
  }
}

double attention_scale(const config::ModelArchitecture& a) {
  return 1.0 / std::sqrt(static_cast<double>(a.head_dim));
}

// What the SwiGLU MLP keeps for its backward; what it does not keep the backward recomputes
// with the same ops from what it does (selective recomputation).
enum class MlpKept {
  everything,  // gate_up and hidden = silu(gate) ⊙ up
  gate_up,     // moe_act: hidden is recomputed from gate_up
  input_only,  // mlp / shared_experts: gate_up and hidden are recomputed from the input
};

// The SwiGLU MLP of dense layers and of the shared expert: out = down(silu(gate) ⊙ up).
// Tensors not kept are scratch temporaries and left undefined in gate_up / hidden.
void swiglu_mlp_forward(const ops::OpContext& ctx, core::Arena& keep, core::Arena& scratch,
                        const DenseMlpParams& mlp, const Tensor& input, Tensor& gate_up,
                        Tensor& hidden, const Tensor& out, MlpKept kept) {
  const DType dtype = input.dtype();
  const std::int64_t tokens = input.size(0);
  const std::int64_t twice_intermediate = mlp.gate_up.value.size(0);
  core::ArenaScope temporaries(scratch);
  const Tensor projected =
      (kept == MlpKept::input_only ? scratch : keep).allocate({tokens, twice_intermediate}, dtype);
  const Tensor activation = (kept == MlpKept::everything ? keep : scratch)
                                .allocate({tokens, twice_intermediate / 2}, dtype);
  ops::linear_forward(ctx, input, mlp.gate_up.value, projected);
  ops::swiglu_fused_forward(ctx, projected, activation);
  ops::linear_forward(ctx, activation, mlp.down.value, out);
  gate_up = kept == MlpKept::input_only ? Tensor{} : projected;
  hidden = kept == MlpKept::everything ? activation : Tensor{};
}

// dinput: overwrite or accumulate (mode). An undefined `gate_up` is recomputed from the
// input, an undefined `hidden` from gate_up.
void swiglu_mlp_backward(const ops::OpContext& ctx, core::Arena& scratch, const DenseMlpParams& mlp,
                         const Tensor& dout, const Tensor& input, const Tensor& kept_gate_up,
                         const Tensor& kept_hidden, const Tensor& dinput, GradMode mode) {
  const DType dtype = dout.dtype();
  core::ArenaScope temporaries(scratch);
  Tensor gate_up = kept_gate_up;
  if (!gate_up.defined()) {
    gate_up = scratch.allocate({input.size(0), mlp.gate_up.value.size(0)}, dtype);
    ops::linear_forward(ctx, input, mlp.gate_up.value, gate_up);
  }
  Tensor hidden = kept_hidden;
  if (!hidden.defined()) {
    hidden = scratch.allocate({gate_up.size(0), gate_up.size(1) / 2}, dtype);
    ops::swiglu_fused_forward(ctx, gate_up, hidden);
  }
  const Tensor dhidden = scratch.allocate(hidden.shape(), dtype);
  const Tensor dgate_up = scratch.allocate(gate_up.shape(), dtype);
  ops::linear_backward(ctx, dout, hidden, mlp.down.value, dhidden, mlp.down.grad);
  ops::swiglu_fused_backward(ctx, dhidden, gate_up, dgate_up);
  ops::linear_backward(ctx, dgate_up, input, mlp.gate_up.value, dinput, mlp.gate_up.grad, mode);
}

// Full attention on saved.normed_input; adds its output to saved.mid. Hybrid layers use
// zero-centred q/k norms, partial RoPE (rotary_dim) and the sigmoid output gate.
void attention_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                       const Tensor& input, DecoderLayerActivations& saved) {
  const DType dtype = input.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  core::Arena& keep = *run.seam.activations;
  const ops::OpContext& ctx = run.seam.ops;
  const double eps = a.rms_norm_eps;
  const RmsNormVariant variant = residual_norm_variant(a);
  const bool gated = params.attention.q_gate_proj.value.defined();

  const auto project_normed = [&](const Param& proj, const Param& norm, std::int64_t heads,
                                  Tensor& raw, ops::RmsNormSaved& norm_saved, Tensor& out) {
    raw = keep.allocate({n.tokens, heads, n.head_dim}, dtype);
    ops::linear_forward(ctx, saved.normed_input, proj.value,
                        raw.reshape({n.tokens, heads * n.head_dim}));
    out = keep.allocate({n.tokens, heads, n.head_dim}, dtype);
    norm_saved.inv_rms = keep.allocate({n.tokens * heads}, dtype);
    ops::rmsnorm_forward(ctx, raw, norm.value, eps, variant, out, norm_saved);
    apply_rope(run, out, /*inverse=*/false);
  };
  project_normed(params.attention.q_proj, params.attention.q_norm, n.q_heads, saved.q_raw,
                 saved.q_norm, saved.q);
  project_normed(params.attention.k_proj, params.attention.k_norm, n.kv_heads, saved.k_raw,
                 saved.k_norm, saved.k);
  saved.v = keep.allocate({n.tokens, n.kv_heads, n.head_dim}, dtype);
  ops::linear_forward(ctx, saved.normed_input, params.attention.v_proj.value,
                      saved.v.reshape({n.tokens, n.kv_heads * n.head_dim}));

  saved.attention_out = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
  saved.attention.lse = keep.allocate({n.tokens, n.q_heads}, dtype);
  run.seams.attention->forward(run.seam, layer, saved.q, saved.k, saved.v, attention_scale(a),
                               saved.attention_out, saved.attention);

  Tensor projected = saved.attention_out;
  if (gated) {
    saved.attention_gate = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
    ops::linear_forward(ctx, saved.normed_input, params.attention.q_gate_proj.value,
                        saved.attention_gate.reshape({n.tokens, n.q_heads * n.head_dim}));
    saved.gated_attention_out = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
    ops::sigmoid_gate_forward(ctx, saved.attention_out, saved.attention_gate,
                              saved.gated_attention_out);
    projected = saved.gated_attention_out;
  }
  ops::gemm(ctx, projected.reshape({n.tokens, n.q_heads * n.head_dim}), ops::Transpose::no,
            params.attention.o_proj.value, ops::Transpose::yes, saved.mid, 1.0,
            /*accumulate=*/true);
}

// Router, aux-loss statistics, permutation and experts; writes the un-permuted, weighted
// expert output to `mlp_out` [T, h]. Returns the layer's aux loss.
double moe_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                   DecoderLayerActivations& saved, const Tensor& mlp_out) {
  const DType dtype = saved.normed_mid.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, saved.normed_mid);
  core::Arena& keep = *run.seam.activations;
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  const int top_k = static_cast<int>(n.top_k);

  saved.router.probs = keep.allocate({n.tokens, n.experts}, dtype);
  saved.expert_ids = keep.allocate({n.tokens, n.top_k}, DType::i32);
  saved.routing_weights = keep.allocate({n.tokens, n.top_k}, dtype);
  const std::int64_t assignments = n.tokens * n.top_k;
  saved.plan.expert_order = keep.allocate({assignments}, DType::i32);
  saved.plan.assignment_row = keep.allocate({assignments}, DType::i32);
  // Grouped products read the offsets where the plan leaves them (device memory on the GPU);
  // per-expert products size their calls from host offsets, which cost a synchronisation.
  core::Arena& host = run.seam.host != nullptr ? *run.seam.host : keep;
  saved.plan.expert_offsets =
      (run.moe_grouped_gemm ? keep : host).allocate({n.experts + 1}, DType::i64);
  saved.plan.tokens_per_expert = Tensor{};
  // x_perm is only an input of the expert computation; the dispatcher keeps what it needs.
  // With bf16 activations it is bf16 (the permutation runs into an fp32 copy first; the expert
  // products read the rounded rows), and a temporary of this forward when the dispatcher sends
  // the rows elsewhere.
  const bool bf16_rows = run.seam.bf16_activations;
  const bool x_perm_kept = run.seams.experts->keeps_x_perm() || !bf16_rows;
  std::optional<core::ArenaScope> send_scope;
  if (!x_perm_kept) send_scope.emplace(scratch);
  const Tensor x_perm = (x_perm_kept ? keep : scratch)
                            .allocate({assignments, n.hidden}, bf16_rows ? DType::bf16 : dtype);
  {
    core::ArenaScope temporaries(scratch);
    const Tensor permuted = bf16_rows ? scratch.allocate({assignments, n.hidden}, dtype) : x_perm;
    const Tensor logits = scratch.allocate({n.tokens, n.experts}, dtype);
    ops::linear_forward(router_context(ctx), saved.normed_mid, params.moe.router.value, logits);
    if (run.moe_router_force_load_balancing) {
      ops::balanced_router_forward(ctx, logits, run.positions, layer, top_k, a.norm_topk_prob,
                                   saved.expert_ids, saved.routing_weights, saved.router);
      ops::build_permute_plan(ctx, saved.expert_ids, static_cast<int>(n.experts), saved.plan);
      ops::permute_forward(ctx, saved.normed_mid, saved.plan, x_perm);
    } else if (run.moe_permute_fusion) {
      ops::route_and_permute(ctx, logits, top_k, a.norm_topk_prob, saved.normed_mid,
                             saved.expert_ids, saved.routing_weights, saved.router, saved.plan,
                             permuted);
    } else {
      ops::router_forward(ctx, logits, top_k, a.norm_topk_prob, saved.expert_ids,
                          saved.routing_weights, saved.router);
      ops::build_permute_plan(ctx, saved.expert_ids, static_cast<int>(n.experts), saved.plan);
      ops::permute_forward(ctx, saved.normed_mid, saved.plan, permuted);
    }
    if (bf16_rows) ops::convert(ctx, permuted, x_perm);
  }

  double aux_loss = 0.0;
  if (run.aux_loss != ops::MoeAuxLossType::none) {
    const std::int64_t sequences = run.cu_seqlens.numel() - 1;
    saved.aux_grad_coeff = keep.allocate({sequences, n.experts}, dtype);
    core::ArenaScope temporaries(scratch);
    const Tensor counts = scratch.allocate({sequences, n.experts}, dtype);
    const Tensor prob_sums = scratch.allocate({sequences, n.experts}, dtype);
    // The ids are the router's own: nothing to verify (and no synchronisation for it).
    ops::moe_aux_loss_statistics(ctx, saved.router.probs, saved.expert_ids, run.cu_seqlens,
                                 run.token_is_real, counts, prob_sums,
                                 /*verify_expert_ids=*/false);
    run.seams.statistics->reduce(run.seam, counts, prob_sums);
    if (run.aux_losses.defined()) {
      ops::moe_aux_loss_finish(ctx, counts, prob_sums, top_k, a.router_aux_loss_coef,
                               run.aux_num_sequences_global, saved.aux_grad_coeff,
                               run.aux_losses.select(layer));
    } else {
      aux_loss = ops::moe_aux_loss_finish(ctx, counts, prob_sums, top_k, a.router_aux_loss_coef,
                                          run.aux_num_sequences_global, saved.aux_grad_coeff);
    }
  }

  // bf16 activations: the expert outputs are kept (and, under EP, come home) in bf16, and the
  // un-permutation reads those rounded values in forward and backward alike.
  saved.y_perm =
      keep.allocate({assignments, n.hidden}, run.seam.bf16_activations ? DType::bf16 : dtype);
  // The shared expert reads only normed_mid: under moe_shared_expert_overlap it runs while the
  // routed rows travel; its output joins mlp_out after the un-permutation either way.
  const auto shared_expert = [&] {
    saved.shared_out = keep.allocate({n.tokens, n.hidden}, dtype);
    const MlpKept kept = run.recompute.shared_experts ? MlpKept::input_only
                         : run.recompute.moe_act      ? MlpKept::gate_up
                                                      : MlpKept::everything;
    swiglu_mlp_forward(ctx, keep, scratch, params.moe.shared_expert, saved.normed_mid,
                       saved.shared_gate_up, saved.shared_hidden, saved.shared_out, kept);
    saved.shared_gate_logit = keep.allocate({n.tokens, 1}, dtype);
    ops::linear_forward(ctx, saved.normed_mid, params.moe.shared_expert_gate.value,
                        saved.shared_gate_logit);
  };
  const bool shared_beside = params.moe.has_shared_expert && run.moe_shared_expert_overlap;
  saved.experts.recompute_hidden = run.recompute.moe_act;
  if (shared_beside) {
    run.seams.experts->forward_beside(run.seam, layer, x_perm, saved.plan.expert_offsets,
                                      params.moe.experts, saved.y_perm, saved.experts,
                                      shared_expert);
  } else {
    run.seams.experts->forward(run.seam, layer, x_perm, saved.plan.expert_offsets,
                               params.moe.experts, saved.y_perm, saved.experts);
  }
  send_scope.reset();
  ops::unpermute_forward(ctx, saved.y_perm, saved.plan, saved.routing_weights, mlp_out);

  if (params.moe.has_shared_expert) {
    // mlp_out += σ(u · w_sg) · SharedExpert(u)  (qwen-moe.md §3.8)
    if (!shared_beside) shared_expert();
    ops::sigmoid_row_gate_forward(ctx, saved.shared_out, saved.shared_gate_logit, mlp_out,
                                  GradMode::accumulate);
  }
  return aux_loss;
}

}  // namespace

ops::RmsNormVariant residual_norm_variant(const config::ModelArchitecture& architecture) {
  return architecture.is_hybrid() ? RmsNormVariant::one_plus_weight : RmsNormVariant::plain;
}

double decoder_layer_forward(const LayerRunContext& run, int layer_index,
                             const DecoderLayerParams& params, const Tensor& input,
                             DecoderLayerActivations& saved, const Tensor& output) {
  const DType dtype = input.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  const RmsNormVariant variant = residual_norm_variant(a);
  core::Arena& keep = *run.seam.activations;
  // Recomputed norm outputs live in scratch for this forward only; the norm statistics are kept.
  std::optional<core::ArenaScope> norm_outputs;
  if (run.recompute.layernorm) norm_outputs.emplace(*run.seam.scratch);
  core::Arena& norm_arena = run.recompute.layernorm ? *run.seam.scratch : keep;

  saved.normed_input = norm_arena.allocate({n.tokens, n.hidden}, dtype);
  saved.input_norm.inv_rms = keep.allocate({n.tokens}, dtype);
  ops::rmsnorm_forward(run.seam.ops, input, params.input_norm.value, a.rms_norm_eps, variant,
                       saved.normed_input, saved.input_norm);
  // Token mixer: mid = input + mixer(normed_input).
  saved.mid = keep.allocate({n.tokens, n.hidden}, dtype);
  saved.mid.copy_from(input);
  if (params.mixer == config::LayerMixer::full_attention) {
    attention_forward(run, layer_index, params, input, saved);
  } else {
    gated_deltanet_forward(run, layer_index, params.linear_attention, saved.linear,
                           saved.normed_input, saved.mid);
  }

  saved.normed_mid = norm_arena.allocate({n.tokens, n.hidden}, dtype);
  saved.post_attention_norm.inv_rms = keep.allocate({n.tokens}, dtype);
  ops::rmsnorm_forward(run.seam.ops, saved.mid, params.post_attention_norm.value, a.rms_norm_eps,
                       variant, saved.normed_mid, saved.post_attention_norm);
  // The MLP writes straight into `output`, then the residual is added in place.
  double aux_loss = 0.0;
  if (params.is_moe) {
    aux_loss = moe_forward(run, layer_index, params, saved, output);
  } else {
    swiglu_mlp_forward(run.seam.ops, keep, *run.seam.scratch, params.dense, saved.normed_mid,
                       saved.dense_gate_up, saved.dense_hidden, output,
                       run.recompute.mlp ? MlpKept::input_only : MlpKept::everything);
  }
  ops::add(run.seam.ops, output, saved.mid, output);
  if (run.recompute.layernorm) {
    saved.normed_input = Tensor{};
    saved.normed_mid = Tensor{};
  }
  return aux_loss;
}

namespace {

// d(normed_input) of a full-attention mixer (overwrite) from d(mid) = grad.
void attention_backward(const LayerRunContext& run, int layer_index,
                        const DecoderLayerParams& params, const DecoderLayerActivations& saved,
                        const Tensor& normed_input, const Tensor& grad,
                        const Tensor& dnormed_input) {
  const DType dtype = grad.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, normed_input);
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  core::ArenaScope temporaries(scratch);
  const RmsNormVariant variant = residual_norm_variant(a);
  const bool gated = params.attention.q_gate_proj.value.defined();
  const auto flat = [&](const Tensor& t) { return t.reshape({n.tokens, n.q_heads * n.head_dim}); };

  const Tensor dattention = scratch.allocate(saved.attention_out.shape(), dtype);
  Tensor dgate;
  if (gated) {
    // o_proj's input was attention_out ⊙ σ(gate).
    const Tensor dgated = scratch.allocate(saved.attention_out.shape(), dtype);
    ops::linear_backward(ctx, grad, flat(saved.gated_attention_out), params.attention.o_proj.value,
                         flat(dgated), params.attention.o_proj.grad);
    dgate = scratch.allocate(saved.attention_gate.shape(), dtype);
    ops::sigmoid_gate_backward(ctx, dgated, saved.attention_out, saved.attention_gate, dattention,
                               dgate);
  } else {
    ops::linear_backward(ctx, grad, flat(saved.attention_out), params.attention.o_proj.value,
                         flat(dattention), params.attention.o_proj.grad);
  }
  const Tensor dq = scratch.allocate(saved.q.shape(), dtype);
  const Tensor dk = scratch.allocate(saved.k.shape(), dtype);
  const Tensor dv = scratch.allocate(saved.v.shape(), dtype);
  run.seams.attention->backward(run.seam, layer_index, dattention, saved.q, saved.k, saved.v,
                                saved.attention_out, saved.attention, attention_scale(a), dq, dk,
                                dv);

  const auto projection_backward = [&](const Tensor& dprojected, const Tensor& raw,
                                       const Param& norm, const ops::RmsNormSaved& norm_saved,
                                       const Param& proj, GradMode mode) {
    apply_rope(run, dprojected, /*inverse=*/true);
    core::ArenaScope projection_temporaries(scratch);
    const Tensor draw = scratch.allocate(raw.shape(), dtype);
    ops::rmsnorm_backward(ctx, dprojected, raw, norm.value, variant, norm_saved, draw, norm.grad);
    ops::linear_backward(ctx, draw.reshape({n.tokens, raw.size(1) * n.head_dim}), normed_input,
                         proj.value, dnormed_input, proj.grad, mode);
  };
  projection_backward(dq, saved.q_raw, params.attention.q_norm, saved.q_norm,
                      params.attention.q_proj, GradMode::overwrite);
  projection_backward(dk, saved.k_raw, params.attention.k_norm, saved.k_norm,
                      params.attention.k_proj, GradMode::accumulate);
  ops::linear_backward(ctx, dv.reshape({n.tokens, n.kv_heads * n.head_dim}), normed_input,
                       params.attention.v_proj.value, dnormed_input, params.attention.v_proj.grad,
                       GradMode::accumulate);
  if (gated)
    ops::linear_backward(ctx, flat(dgate), normed_input, params.attention.q_gate_proj.value,
                         dnormed_input, params.attention.q_gate_proj.grad, GradMode::accumulate);
}

// A residual norm's output: kept, or (selective recomputation of layernorm) recomputed into
// scratch by the same op on the kept input, so bitwise what the forward produced.
Tensor normed_output(const LayerRunContext& run, const Tensor& kept, const Tensor& norm_input,
                     const Param& norm) {
  if (kept.defined()) return kept;
  const auto& a = *run.architecture;
  core::Arena& scratch = *run.seam.scratch;
  const Tensor out = scratch.allocate(norm_input.shape(), norm_input.dtype());
  ops::RmsNormSaved statistics{scratch.allocate({norm_input.size(0)}, norm_input.dtype())};
  ops::rmsnorm_forward(run.seam.ops, norm_input, norm.value, a.rms_norm_eps,
                       residual_norm_variant(a), out, statistics);
  return out;
}

}  // namespace

void decoder_layer_backward(const LayerRunContext& run, int layer_index,
                            const DecoderLayerParams& params, const Tensor& input,
                            const DecoderLayerActivations& saved, const Tensor& grad) {
  const DType dtype = input.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  core::ArenaScope temporaries(scratch);
  const RmsNormVariant variant = residual_norm_variant(a);

  // MLP block: grad is d(output) = d(mid) through the residual, plus the MLP path below.
  const Tensor dnormed_mid = scratch.allocate({n.tokens, n.hidden}, dtype);
  {
    core::ArenaScope mlp_temporaries(scratch);
    const Tensor normed_mid =
        normed_output(run, saved.normed_mid, saved.mid, params.post_attention_norm);
    if (params.is_moe) {
      const std::int64_t assignments = n.tokens * n.top_k;
      core::ArenaScope moe_temporaries(scratch);
      const Tensor dy_perm = scratch.allocate({assignments, n.hidden}, dtype);
      const Tensor dweights = scratch.allocate({n.tokens, n.top_k}, dtype);
      ops::unpermute_backward(ctx, grad, saved.y_perm, saved.plan, saved.routing_weights, dy_perm,
                              dweights);
      const Tensor dx_perm = scratch.allocate({assignments, n.hidden}, dtype);
      run.seams.experts->backward(run.seam, layer_index, dy_perm, saved.plan.expert_offsets,
                                  params.moe.experts, saved.experts, dx_perm);
      ops::permute_backward(ctx, dx_perm, saved.plan, dnormed_mid);
      const Tensor dlogits = scratch.allocate({n.tokens, n.experts}, dtype);
      ops::router_backward(ctx, dweights, saved.expert_ids, saved.routing_weights, saved.router,
                           a.norm_topk_prob, dlogits);
      if (run.aux_loss != ops::MoeAuxLossType::none) {
        ops::moe_aux_loss_backward(ctx, saved.router.probs, run.cu_seqlens, run.token_is_real,
                                   saved.aux_grad_coeff, dlogits, run.aux_loss_grad_scale);
      }
      ops::linear_backward(router_context(ctx), dlogits, normed_mid, params.moe.router.value,
                           dnormed_mid, params.moe.router.grad, GradMode::accumulate);
      if (params.moe.has_shared_expert) {
        const Tensor dshared = scratch.allocate({n.tokens, n.hidden}, dtype);
        const Tensor dgate_logit = scratch.allocate({n.tokens, 1}, dtype);
        ops::sigmoid_row_gate_backward(ctx, grad, saved.shared_out, saved.shared_gate_logit,
                                       dshared, dgate_logit);
        ops::linear_backward(ctx, dgate_logit, normed_mid, params.moe.shared_expert_gate.value,
                             dnormed_mid, params.moe.shared_expert_gate.grad, GradMode::accumulate);
        swiglu_mlp_backward(ctx, scratch, params.moe.shared_expert, dshared, normed_mid,
                            saved.shared_gate_up, saved.shared_hidden, dnormed_mid,
                            GradMode::accumulate);
      }
    } else {
      swiglu_mlp_backward(ctx, scratch, params.dense, grad, normed_mid, saved.dense_gate_up,
                          saved.dense_hidden, dnormed_mid, GradMode::overwrite);
    }
  }
  ops::rmsnorm_backward(ctx, dnormed_mid, saved.mid, params.post_attention_norm.value, variant,
                        saved.post_attention_norm, grad, params.post_attention_norm.grad,
                        GradMode::accumulate);

  // Token mixer: grad is now d(mid) = d(input) through the residual plus the path below.
  const Tensor dnormed_input = dnormed_mid;  // free again: reuse its memory
  const Tensor normed_input = normed_output(run, saved.normed_input, input, params.input_norm);
  if (params.mixer == config::LayerMixer::full_attention) {
    attention_backward(run, layer_index, params, saved, normed_input, grad, dnormed_input);
  } else {
    gated_deltanet_backward(run, layer_index, params.linear_attention, saved.linear, normed_input,
                            grad, dnormed_input);
  }
  ops::rmsnorm_backward(ctx, dnormed_input, input, params.input_norm.value, variant,
                        saved.input_norm, grad, params.input_norm.grad, GradMode::accumulate);
}

}  // namespace dyncp::model
