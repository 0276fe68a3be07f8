#include "model/local_seams.hpp"

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/swiglu.hpp"

namespace dyncp::model {

void run_experts_forward(const SeamContext& context, const Tensor& rows,
                         const Tensor& group_offsets, const ExpertWeights& weights, const Tensor& y,
                         ExpertSaved& saved) {
  const std::int64_t num_rows = rows.size(0);
  const std::int64_t twice_intermediate = weights.gate_up.value.size(1);
  saved.rows = rows;
  saved.group_offsets = group_offsets;
  // rows may be bf16 storage (bf16 activations); the products compute in the weights' dtype.
  const core::DType dtype = weights.gate_up.value.dtype();
  saved.gate_up = context.activations->allocate({num_rows, twice_intermediate}, dtype);
  core::ArenaScope temporaries(*context.scratch);
  // bf16 activations keep the SwiGLU output (the down product's input, which the product
  // rounds to bf16 anyway) in bf16, computed into an fp32 temporary.
  const bool bf16_hidden = context.bf16_activations && !saved.recompute_hidden;
  const core::Shape hidden_shape{num_rows, twice_intermediate / 2};
  core::Arena& hidden_arena =
      saved.recompute_hidden || bf16_hidden ? *context.scratch : *context.activations;
  const Tensor hidden = hidden_arena.allocate(hidden_shape, dtype);
  const Tensor kept_hidden =
      bf16_hidden ? context.activations->allocate(hidden_shape, core::DType::bf16) : hidden;
  // A bf16 y (bf16 activations) is the rounded copy of the products' fp32 output.
  const Tensor out = y.dtype() == dtype ? y : context.scratch->allocate(y.shape(), dtype);
  ops::grouped_linear_forward(context.ops, rows, weights.gate_up.value, group_offsets,
                              saved.gate_up);
  ops::swiglu_fused_forward(context.ops, saved.gate_up, hidden);
  if (bf16_hidden) ops::convert(context.ops, hidden, kept_hidden);
  ops::grouped_linear_forward(context.ops, kept_hidden, weights.down.value, group_offsets, out);
  if (out.raw_data() != y.raw_data()) ops::convert(context.ops, out, y);
  saved.hidden = saved.recompute_hidden ? Tensor{} : kept_hidden;
}

void run_experts_backward(const SeamContext& context, const Tensor& dy,
                          const ExpertWeights& weights, const ExpertSaved& saved,
                          const Tensor& drows) {
  core::ArenaScope scope(*context.scratch);
  const std::int64_t num_rows = saved.gate_up.size(0);
  const core::Shape hidden_shape{num_rows, saved.gate_up.size(1) / 2};
  Tensor hidden = saved.hidden;
  if (saved.recompute_hidden) {
    // The same op on the same kept gate_up: bitwise the hidden the forward used.
    hidden = context.scratch->allocate(hidden_shape, dy.dtype());
    ops::swiglu_fused_forward(context.ops, saved.gate_up, hidden);
  }
  const Tensor dhidden = context.scratch->allocate(hidden_shape, dy.dtype());
  const Tensor dgate_up = context.scratch->allocate(saved.gate_up.shape(), dy.dtype());
  ops::grouped_linear_backward(context.ops, dy, hidden, weights.down.value, saved.group_offsets,
                               dhidden, weights.down.grad);
  ops::swiglu_fused_backward(context.ops, dhidden, saved.gate_up, dgate_up);
  ops::grouped_linear_backward(context.ops, dgate_up, saved.rows, weights.gate_up.value,
                               saved.group_offsets, drows, weights.gate_up.grad);
}

void LocalAttentionContext::begin_bin(const SeamContext&, const LocalBinLayout& layout) {
  layout_.q_cu_seqlens = layout.cu_seqlens;
  layout_.kv_cu_seqlens = layout.cu_seqlens;
  layout_.q_positions = layout.positions;
  layout_.kv_positions = layout.positions;
  layout_.sliding_window = layout.sliding_window;
}

void LocalAttentionContext::forward(const SeamContext& context, int, const Tensor& q,
                                    const Tensor& k, const Tensor& v, double scale,
                                    const Tensor& out, ops::AttentionSaved& saved) {
  ops::attention_forward(context.ops, q, k, v, layout_, scale, out, saved);
}

void LocalAttentionContext::backward(const SeamContext& context, int, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const ops::AttentionSaved& saved,
                                     double scale, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv) {
  ops::OpContext ops_context = context.ops;
  ops_context.scratch = context.scratch;
  ops::attention_backward(ops_context, dout, q, k, v, out, saved, layout_, scale, dq, dk, dv);
}

void LocalExpertDispatcher::forward(const SeamContext& context, int, const Tensor& x_perm,
                                    const Tensor& expert_offsets, const ExpertWeights& weights,
                                    const Tensor& y_perm, ExpertSaved& saved) {
  DYNCP_CHECK(
      weights.first_expert == 0 && weights.gate_up.value.size(0) + 1 == expert_offsets.numel(),
      "the local dispatcher needs every expert on this rank");
  run_experts_forward(context, x_perm, expert_offsets, weights, y_perm, saved);
}

void LocalExpertDispatcher::backward(const SeamContext& context, int, const Tensor& dy_perm,
                                     const Tensor&, const ExpertWeights& weights,
                                     const ExpertSaved& saved, const Tensor& dx_perm) {
  run_experts_backward(context, dy_perm, weights, saved, dx_perm);
}

}  // namespace dyncp::model
