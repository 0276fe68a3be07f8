#include "model/decoder_layer.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "model/moe_block.hpp"
#include "model/swiglu_mlp.hpp"
#include "model/tensor_parallel_region.hpp"
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

// Full attention on `input` (the normed rows, every row under tensor parallelism); adds its
// output (under TP this rank's heads' part of it) to `out`. Hybrid layers use zero-centred q/k
// norms, partial RoPE (rotary_dim) and the sigmoid output gate.
void attention_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                       const Tensor& input, DecoderLayerActivations& saved, const Tensor& out) {
  const DType dtype = input.dtype();
  const auto& a = *run.architecture;
  const Dims n = dims_of(run, input);
  core::Arena& keep = *run.seam.activations;
  const ops::OpContext& ctx = run.seam.ops;
  const double eps = a.rms_norm_eps;
  const RmsNormVariant variant = residual_norm_variant(a);
  const bool gated = params.attention.q_gate_proj.value.defined();

  const auto project_normed = [&](const Param& proj, const Param& norm, std::int64_t heads,
                                  Tensor& raw, ops::RmsNormSaved& norm_saved, Tensor& normed) {
    raw = keep.allocate({n.tokens, heads, n.head_dim}, dtype);
    ops::linear_forward(ctx, input, proj.value, raw.reshape({n.tokens, heads * n.head_dim}));
    normed = keep.allocate({n.tokens, heads, n.head_dim}, dtype);
    norm_saved.inv_rms = keep.allocate({n.tokens * heads}, dtype);
    ops::rmsnorm_forward(ctx, raw, norm.value, eps, variant, normed, norm_saved);
    apply_rope(run, normed, /*inverse=*/false);
  };
  project_normed(params.attention.q_proj, params.attention.q_norm, n.q_heads, saved.q_raw,
                 saved.q_norm, saved.q);
  project_normed(params.attention.k_proj, params.attention.k_norm, n.kv_heads, saved.k_raw,
                 saved.k_norm, saved.k);
  saved.v = keep.allocate({n.tokens, n.kv_heads, n.head_dim}, dtype);
  ops::linear_forward(ctx, input, params.attention.v_proj.value,
                      saved.v.reshape({n.tokens, n.kv_heads * n.head_dim}));

  saved.attention_out = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
  saved.attention.lse = keep.allocate({n.tokens, n.q_heads}, dtype);
  run.seams.attention->forward(run.seam, layer, saved.q, saved.k, saved.v, attention_scale(a),
                               saved.attention_out, saved.attention);

  Tensor projected = saved.attention_out;
  if (gated) {
    saved.attention_gate = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
    ops::linear_forward(ctx, input, params.attention.q_gate_proj.value,
                        saved.attention_gate.reshape({n.tokens, n.q_heads * n.head_dim}));
    saved.gated_attention_out = keep.allocate({n.tokens, n.q_heads, n.head_dim}, dtype);
    ops::sigmoid_gate_forward(ctx, saved.attention_out, saved.attention_gate,
                              saved.gated_attention_out);
    projected = saved.gated_attention_out;
  }
  ops::gemm(ctx, projected.reshape({n.tokens, n.q_heads * n.head_dim}), ops::Transpose::no,
            params.attention.o_proj.value, ops::Transpose::yes, out, 1.0, /*accumulate=*/true);
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
  const TensorParallelRegion region(run);
  {
    // Under tensor parallelism the mixer reads every row and its output projection leaves this
    // rank's heads' part, summed over TP into the layer's rows.
    core::ArenaScope block_temporaries(*run.seam.scratch);
    const Tensor block_input = region.gathered(saved.normed_input);
    const Tensor out =
        region.active() ? region.partial_output(block_input.size(0), n.hidden, dtype) : saved.mid;
    if (params.mixer == config::LayerMixer::full_attention) {
      attention_forward(run, layer_index, params, block_input, saved, out);
    } else {
      gated_deltanet_forward(run, layer_index, params.linear_attention, saved.linear, block_input,
                             out);
    }
    if (region.active()) region.sum_output(out, saved.mid, GradMode::accumulate);
  }

  saved.normed_mid = norm_arena.allocate({n.tokens, n.hidden}, dtype);
  saved.post_attention_norm.inv_rms = keep.allocate({n.tokens}, dtype);
  ops::rmsnorm_forward(run.seam.ops, saved.mid, params.post_attention_norm.value, a.rms_norm_eps,
                       variant, saved.normed_mid, saved.post_attention_norm);
  // The MLP writes straight into `output`, then the residual is added in place.
  double aux_loss = 0.0;
  if (params.is_moe) {
    aux_loss = moe_block_forward(run, layer_index, params, saved, output);
  } else {
    core::ArenaScope block_temporaries(*run.seam.scratch);
    const Tensor block_input = region.gathered(saved.normed_mid);
    const Tensor out =
        region.active() ? region.partial_output(block_input.size(0), n.hidden, dtype) : output;
    swiglu_mlp_forward(run.seam.ops, keep, *run.seam.scratch, params.dense, block_input,
                       saved.dense_gate_up, saved.dense_hidden, out,
                       run.recompute.mlp ? MlpKept::input_only : MlpKept::everything);
    if (region.active()) region.sum_output(out, output, GradMode::overwrite);
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
  const TensorParallelRegion region(run);
  const Tensor dnormed_mid = scratch.allocate({n.tokens, n.hidden}, dtype);
  {
    core::ArenaScope mlp_temporaries(scratch);
    const Tensor normed_mid =
        normed_output(run, saved.normed_mid, saved.mid, params.post_attention_norm);
    if (params.is_moe) {
      moe_block_backward(run, layer_index, params, saved, normed_mid, grad, dnormed_mid);
    } else {
      const Tensor block_input = region.gathered(normed_mid);
      const Tensor dinput = region.input_grad_buffer(dnormed_mid, block_input.size(0));
      swiglu_mlp_backward(ctx, scratch, params.dense, region.gathered(grad), block_input,
                          saved.dense_gate_up, saved.dense_hidden, dinput, GradMode::overwrite);
      region.sum_input_grad(dinput, dnormed_mid);
    }
  }
  ops::rmsnorm_backward(ctx, dnormed_mid, saved.mid, params.post_attention_norm.value, variant,
                        saved.post_attention_norm, grad, params.post_attention_norm.grad,
                        GradMode::accumulate);

  // Token mixer: grad is now d(mid) = d(input) through the residual plus the path below.
  const Tensor dnormed_input = dnormed_mid;  // free again: reuse its memory
  const Tensor normed_input = normed_output(run, saved.normed_input, input, params.input_norm);
  {
    core::ArenaScope mixer_temporaries(scratch);
    const Tensor block_input = region.gathered(normed_input);
    const Tensor block_grad = region.gathered(grad);
    const Tensor dinput = region.input_grad_buffer(dnormed_input, block_input.size(0));
    if (params.mixer == config::LayerMixer::full_attention) {
      attention_backward(run, layer_index, params, saved, block_input, block_grad, dinput);
    } else {
      gated_deltanet_backward(run, layer_index, params.linear_attention, saved.linear, block_input,
                              block_grad, dinput);
    }
    region.sum_input_grad(dinput, dnormed_input);
  }
  ops::rmsnorm_backward(ctx, dnormed_input, input, params.input_norm.value, variant,
                        saved.input_norm, grad, params.input_norm.grad, GradMode::accumulate);
}

}  // namespace dyncp::model
