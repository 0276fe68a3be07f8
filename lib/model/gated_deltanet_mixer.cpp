// The Gated DeltaNet token mixer of the hybrid layers (qwen-moe.md §3.4): per-token
// projections and gates here, the sequence-level part (conv, L2 norm, recurrence) behind the
// LinearAttentionContext seam, then the gated output norm and out_proj.
#include "core/error.hpp"
#include "model/decoder_layer.hpp"
#include "ops/elementwise.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/gemm.hpp"

namespace dyncp::model {

using core::DType;

namespace {

LinearAttentionDims dims_of(const config::ModelArchitecture& a) {
  LinearAttentionDims dims;
  dims.key_heads = a.linear_num_key_heads;
  dims.key_head_dim = a.linear_key_head_dim;
  dims.value_heads = a.linear_num_value_heads;
  dims.value_head_dim = a.linear_value_head_dim;
  return dims;
}

// conv1d.weight [C, 1, K] as the ops take it, [C, K].
Tensor conv_matrix(const Tensor& weight) {
  return weight.reshape({weight.size(0), weight.size(2)});
}

Tensor rows_by_features(const Tensor& t) {
  return t.reshape({t.size(0), t.numel() / t.size(0)});
}

}  // namespace

void gated_deltanet_forward(const LayerRunContext& run, int layer_index,
                            const GatedDeltaNetParams& params, GatedDeltaNetActivations& saved,
                            const Tensor& normed_input, const Tensor& residual) {
  const auto& a = *run.architecture;
  const LinearAttentionDims dims = dims_of(a);
  const std::int64_t tokens = normed_input.size(0);
  const DType dtype = normed_input.dtype();
  core::Arena& keep = *run.seam.activations;
  const ops::OpContext& ctx = run.seam.ops;
  DYNCP_CHECK(run.seams.linear_attention != nullptr,
              "a model with Gated DeltaNet layers needs a linear-attention seam");

  // in_proj_qkv's rows are [q | k | v]; three GEMMs on its row blocks give contiguous q, k, v.
  const std::int64_t key_dim = dims.key_heads * dims.key_head_dim;
  const Tensor& qkv = params.in_proj_qkv.value;
  saved.q_raw = keep.allocate({tokens, dims.key_heads, dims.key_head_dim}, dtype);
  saved.k_raw = keep.allocate({tokens, dims.key_heads, dims.key_head_dim}, dtype);
  saved.v_raw = keep.allocate({tokens, dims.value_heads, dims.value_head_dim}, dtype);
  // bf16 activations keep z, the rule output and the gated-norm output in bf16 (each rounded
  // once from its fp32 producer into a scratch temporary); the gated norm reads the kept z and
  // rule output in forward and backward alike, out_proj's product the kept norm output (the
  // operand it rounds to bf16 anyway).
  const bool bf16_kept = run.seam.bf16_activations;
  const DType kept_dtype = bf16_kept ? DType::bf16 : dtype;
  core::ArenaScope temporaries(*run.seam.scratch);
  const auto produced = [&](const Tensor& kept) {
    return bf16_kept ? run.seam.scratch->allocate(kept.shape(), dtype) : kept;
  };
  const auto keep_rounded = [&](const Tensor& value, const Tensor& kept) {
    if (bf16_kept) ops::convert(ctx, value, kept);
  };
  saved.z = keep.allocate({tokens, dims.value_heads, dims.value_head_dim}, kept_dtype);
  const Tensor z = produced(saved.z);
  saved.a = keep.allocate({tokens, dims.value_heads}, dtype);
  saved.b = keep.allocate({tokens, dims.value_heads}, dtype);
  ops::linear_forward(ctx, normed_input, qkv.slice(0, key_dim), rows_by_features(saved.q_raw));
  ops::linear_forward(ctx, normed_input, qkv.slice(key_dim, 2 * key_dim),
                      rows_by_features(saved.k_raw));
  ops::linear_forward(ctx, normed_input, qkv.slice(2 * key_dim, qkv.size(0)),
                      rows_by_features(saved.v_raw));
  ops::linear_forward(ctx, normed_input, params.in_proj_z.value, rows_by_features(z));
  keep_rounded(z, saved.z);
  ops::linear_forward(ctx, normed_input, params.in_proj_a.value, saved.a);
  ops::linear_forward(ctx, normed_input, params.in_proj_b.value, saved.b);

  saved.g = keep.allocate({tokens, dims.value_heads}, dtype);
  saved.beta = keep.allocate({tokens, dims.value_heads}, dtype);
  ops::gated_delta_gates_forward(ctx, saved.a, saved.b, params.A_log.value, params.dt_bias.value,
                                 saved.g, saved.beta);

  saved.core_out = keep.allocate({tokens, dims.value_heads, dims.value_head_dim}, kept_dtype);
  const Tensor core_out = produced(saved.core_out);
  run.seams.linear_attention->forward(run.seam, layer_index, dims, saved.q_raw, saved.k_raw,
                                      saved.v_raw, conv_matrix(params.conv1d.value), saved.g,
                                      saved.beta, core_out, saved.core);
  keep_rounded(core_out, saved.core_out);

  saved.normed_out = keep.allocate(saved.core_out.shape(), kept_dtype);
  const Tensor normed_out = produced(saved.normed_out);
  saved.out_norm.inv_rms = keep.allocate({tokens * dims.value_heads}, dtype);
  ops::gated_rmsnorm_forward(ctx, saved.core_out, saved.z, params.norm.value, a.rms_norm_eps,
                             normed_out, saved.out_norm);
  keep_rounded(normed_out, saved.normed_out);
  ops::gemm(ctx, rows_by_features(normed_out), ops::Transpose::no, params.out_proj.value,
            ops::Transpose::yes, residual, 1.0, /*accumulate=*/true);
}

void gated_deltanet_backward(const LayerRunContext& run, int layer_index,
                             const GatedDeltaNetParams& params,
                             const GatedDeltaNetActivations& saved, const Tensor& normed_input,
                             const Tensor& dresidual, const Tensor& dnormed_input) {
  const LinearAttentionDims dims = dims_of(*run.architecture);
  const DType dtype = normed_input.dtype();
  core::Arena& scratch = *run.seam.scratch;
  core::ArenaScope temporaries(scratch);
  const ops::OpContext& ctx = run.seam.ops;
  using ops::GradMode;

  const Tensor dnormed_out = scratch.allocate(saved.normed_out.shape(), dtype);
  ops::linear_backward(ctx, dresidual, rows_by_features(saved.normed_out), params.out_proj.value,
                       rows_by_features(dnormed_out), params.out_proj.grad);
  const Tensor dcore = scratch.allocate(saved.core_out.shape(), dtype);
  const Tensor dz = scratch.allocate(saved.z.shape(), dtype);
  ops::gated_rmsnorm_backward(ctx, dnormed_out, saved.core_out, saved.z, params.norm.value,
                              saved.out_norm, dcore, dz, params.norm.grad);

  const Tensor dq_raw = scratch.allocate(saved.q_raw.shape(), dtype);
  const Tensor dk_raw = scratch.allocate(saved.k_raw.shape(), dtype);
  const Tensor dv_raw = scratch.allocate(saved.v_raw.shape(), dtype);
  const Tensor dg = scratch.allocate(saved.g.shape(), dtype);
  const Tensor dbeta = scratch.allocate(saved.beta.shape(), dtype);
  run.seams.linear_attention->backward(run.seam, layer_index, dims, dcore, saved.q_raw, saved.k_raw,
                                       saved.v_raw, conv_matrix(params.conv1d.value), saved.g,
                                       saved.beta, saved.core, dq_raw, dk_raw, dv_raw,
                                       conv_matrix(params.conv1d.grad), dg, dbeta);

  const Tensor da = scratch.allocate(saved.a.shape(), dtype);
  const Tensor db = scratch.allocate(saved.b.shape(), dtype);
  ops::gated_delta_gates_backward(ctx, dg, dbeta, saved.a, saved.b, params.A_log.value,
                                  params.dt_bias.value, da, db, params.A_log.grad,
                                  params.dt_bias.grad);

  const std::int64_t key_dim = dims.key_heads * dims.key_head_dim;
  const Param& qkv = params.in_proj_qkv;
  const std::int64_t qkv_rows = qkv.value.size(0);
  const auto projection = [&](const Tensor& dy, std::int64_t begin, std::int64_t end,
                              GradMode mode) {
    ops::linear_backward(ctx, rows_by_features(dy), normed_input, qkv.value.slice(begin, end),
                         dnormed_input, qkv.grad.slice(begin, end), mode);
  };
  projection(dq_raw, 0, key_dim, GradMode::overwrite);
  projection(dk_raw, key_dim, 2 * key_dim, GradMode::accumulate);
  projection(dv_raw, 2 * key_dim, qkv_rows, GradMode::accumulate);
  ops::linear_backward(ctx, rows_by_features(dz), normed_input, params.in_proj_z.value,
                       dnormed_input, params.in_proj_z.grad, GradMode::accumulate);
  ops::linear_backward(ctx, da, normed_input, params.in_proj_a.value, dnormed_input,
                       params.in_proj_a.grad, GradMode::accumulate);
  ops::linear_backward(ctx, db, normed_input, params.in_proj_b.value, dnormed_input,
                       params.in_proj_b.grad, GradMode::accumulate);
}

}  // namespace dyncp::model
