#include "model/moe_block.hpp"

#include <algorithm>
#include <functional>
#include <optional>

#include "model/swiglu_mlp.hpp"
#include "model/tensor_parallel_region.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/sigmoid_gate.hpp"

namespace dyncp::model {

using core::DType;
using ops::GradMode;

namespace {

// The router's logits decide the top-k experts of every token, so they are computed in fp32
// also under bf16 products (Megatron's moe_router_dtype: fp32, the setting of the Qwen3-Next
// and Qwen3.5 recipes): bf16 noise on the logits themselves would flip near-tied expert choices
// far more often than the noise the bf16 products upstream leave on the router's input.
ops::OpContext router_context(const ops::OpContext& ctx) {
  ops::OpContext router = ctx;
  router.precision = ops::ComputePrecision::fp32;
  return router;
}

// The rows this rank routes: all of the layer's rows (without TP, or under sequence
// parallelism, where they are the rank's share of the bin), or without sequence parallelism its
// slice of the TP group's (replicated) rows. `begin` / `end` index the layer's rows,
// `bin_begin` / `bin_end` the bin's (positions, real-token mask and sequence bounds).
struct RoutedRows {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t bin_begin = 0;
  std::int64_t bin_end = 0;
  bool sliced = false;       // the outputs must be gathered over TP
  bool part_of_bin = false;  // the rows are not every row of the bin
  std::int64_t count() const { return end - begin; }
};

RoutedRows routed_rows(const LayerRunContext& run, std::int64_t layer_rows) {
  const TensorParallelRegion region(run);
  if (!region.active()) return {0, layer_rows, 0, layer_rows, false, false};
  const int size = run.seams.tensor_parallel->size(), rank = run.seams.tensor_parallel->rank();
  if (region.sequence_parallel()) {
    const std::int64_t first = layer_rows * rank;
    return {0, layer_rows, first, first + layer_rows, false, true};
  }
  const auto [begin, end] = tensor_parallel_row_range(layer_rows, size, rank);
  return {begin, end, begin, end, true, true};
}

// cu_seqlens clipped to the bin's rows [bin_begin, bin_end): sequence s covers rows
// [cu'[s], cu'[s+1]) of them (possibly none). Host i32 [S + 1] from the bin's host arena.
Tensor clipped_cu_seqlens(const LayerRunContext& run, RoutedRows rows) {
  const Tensor& cu = run.cu_seqlens;
  const Tensor clipped = run.seam.host_arena().allocate(cu.shape(), DType::i32);
  const std::int32_t* from = cu.data<std::int32_t>();
  std::int32_t* to = clipped.data<std::int32_t>();
  for (std::int64_t s = 0; s < cu.numel(); ++s)
    to[s] = static_cast<std::int32_t>(
        std::clamp<std::int64_t>(from[s], rows.bin_begin, rows.bin_end) - rows.bin_begin);
  return clipped;
}

// The run context of the routed rows: their positions, real-token mask and sequence bounds.
LayerRunContext routed_context(const LayerRunContext& run, RoutedRows rows,
                               const Tensor& clipped_cu_seqlens) {
  if (!rows.part_of_bin) return run;
  LayerRunContext routed = run;
  routed.positions = run.positions.slice(rows.bin_begin, rows.bin_end);
  if (run.token_is_real.defined())
    routed.token_is_real = run.token_is_real.slice(rows.bin_begin, rows.bin_end);
  routed.cu_seqlens = clipped_cu_seqlens;
  return routed;
}

// Per-sequence routing statistics summed over the ranks holding parts of the sequences: the
// CP group (statistics seam), then the TP group, whose ranks routed different rows.
void reduce_statistics(const LayerRunContext& run, const Tensor& counts, const Tensor& prob_sums) {
  run.seams.statistics->reduce(run.seam, counts, prob_sums);
  const TensorParallelRegion region(run);
  region.all_reduce(counts);
  region.all_reduce(prob_sums);
}

// Router, aux-loss statistics, permutation and experts on `x` [R, h]; writes the un-permuted,
// weighted expert output to `out` [R, h]. Returns the layer's aux loss. `beside`, when set, is
// work the dispatcher runs while the routed rows travel (model.moe_shared_expert_overlap).
double routed_experts_forward(const LayerRunContext& run, int layer,
                              const DecoderLayerParams& params, DecoderLayerActivations& saved,
                              const Tensor& x, const Tensor& out,
                              const std::function<void()>& beside) {
  const DType dtype = x.dtype();
  const auto& a = *run.architecture;
  const std::int64_t tokens = x.size(0), hidden = x.size(1), experts = a.num_experts;
  core::Arena& keep = *run.seam.activations;
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  const int top_k = static_cast<int>(a.num_experts_per_tok);

  saved.router.probs = keep.allocate({tokens, experts}, dtype);
  saved.expert_ids = keep.allocate({tokens, top_k}, DType::i32);
  saved.routing_weights = keep.allocate({tokens, top_k}, dtype);
  const std::int64_t assignments = tokens * top_k;
  saved.plan.expert_order = keep.allocate({assignments}, DType::i32);
  saved.plan.assignment_row = keep.allocate({assignments}, DType::i32);
  // Grouped products read the offsets where the plan leaves them (device memory on the GPU);
  // per-expert products size their calls from host offsets, which cost a synchronisation.
  saved.plan.expert_offsets =
      (run.moe_grouped_gemm ? keep : run.seam.host_arena()).allocate({experts + 1}, DType::i64);
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
                            .allocate({assignments, hidden}, bf16_rows ? DType::bf16 : dtype);
  {
    core::ArenaScope temporaries(scratch);
    const Tensor permuted = bf16_rows ? scratch.allocate({assignments, hidden}, dtype) : x_perm;
    const Tensor logits = scratch.allocate({tokens, experts}, dtype);
    ops::linear_forward(router_context(ctx), x, params.moe.router.value, logits);
    if (run.moe_router_force_load_balancing) {
      ops::balanced_router_forward(ctx, logits, run.positions, layer, top_k, a.norm_topk_prob,
                                   saved.expert_ids, saved.routing_weights, saved.router);
      ops::build_permute_plan(ctx, saved.expert_ids, static_cast<int>(experts), saved.plan);
      ops::permute_forward(ctx, x, saved.plan, x_perm);
    } else if (run.moe_permute_fusion) {
      ops::route_and_permute(ctx, logits, top_k, a.norm_topk_prob, x, saved.expert_ids,
                             saved.routing_weights, saved.router, saved.plan, permuted);
    } else {
      ops::router_forward(ctx, logits, top_k, a.norm_topk_prob, saved.expert_ids,
                          saved.routing_weights, saved.router);
      ops::build_permute_plan(ctx, saved.expert_ids, static_cast<int>(experts), saved.plan);
      ops::permute_forward(ctx, x, saved.plan, permuted);
    }
    if (bf16_rows) ops::convert(ctx, permuted, x_perm);
  }

  double aux_loss = 0.0;
  if (run.aux_loss != ops::MoeAuxLossType::none) {
    const std::int64_t sequences = run.cu_seqlens.numel() - 1;
    saved.aux_grad_coeff = keep.allocate({sequences, experts}, dtype);
    core::ArenaScope temporaries(scratch);
    const Tensor counts = scratch.allocate({sequences, experts}, dtype);
    const Tensor prob_sums = scratch.allocate({sequences, experts}, dtype);
    // The ids are the router's own: nothing to verify (and no synchronisation for it).
    ops::moe_aux_loss_statistics(ctx, saved.router.probs, saved.expert_ids, run.cu_seqlens,
                                 run.token_is_real, counts, prob_sums,
                                 /*verify_expert_ids=*/false);
    reduce_statistics(run, counts, prob_sums);
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
      keep.allocate({assignments, hidden}, run.seam.bf16_activations ? DType::bf16 : dtype);
  saved.experts.recompute_hidden = run.recompute.moe_act;
  if (beside) {
    run.seams.experts->forward_beside(run.seam, layer, x_perm, saved.plan.expert_offsets,
                                      params.moe.experts, saved.y_perm, saved.experts, beside);
  } else {
    run.seams.experts->forward(run.seam, layer, x_perm, saved.plan.expert_offsets,
                               params.moe.experts, saved.y_perm, saved.experts);
  }
  send_scope.reset();
  ops::unpermute_forward(ctx, saved.y_perm, saved.plan, saved.routing_weights, out);
  return aux_loss;
}

MlpKept shared_expert_kept(const LayerRunContext& run) {
  return run.recompute.shared_experts ? MlpKept::input_only
         : run.recompute.moe_act      ? MlpKept::gate_up
                                      : MlpKept::everything;
}

// The shared expert and its gate logit on the routed rows, into saved.shared_out and
// saved.shared_gate_logit (qwen-moe.md §3.8). Under tensor parallelism the SwiGLU runs on every
// row with the rank's columns and its sum over TP is cut to the routed rows.
void shared_expert_forward(const LayerRunContext& run, const DecoderLayerParams& params,
                           DecoderLayerActivations& saved, RoutedRows rows, const Tensor& x) {
  const DType dtype = x.dtype();
  core::Arena& keep = *run.seam.activations;
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  const TensorParallelRegion region(run);
  saved.shared_out = keep.allocate({rows.count(), x.size(1)}, dtype);
  {
    core::ArenaScope temporaries(scratch);
    const Tensor block_input = region.gathered(saved.normed_mid);
    const Tensor partial = region.active()
                               ? region.partial_output(block_input.size(0), x.size(1), dtype)
                               : saved.shared_out;
    swiglu_mlp_forward(ctx, keep, scratch, params.moe.shared_expert, block_input,
                       saved.shared_gate_up, saved.shared_hidden, partial, shared_expert_kept(run));
    if (rows.sliced) {
      region.all_reduce(partial);
      saved.shared_out.copy_from(partial.slice(rows.begin, rows.end));
    } else if (region.active()) {
      region.sum_output(partial, saved.shared_out, GradMode::overwrite);
    }
  }
  saved.shared_gate_logit = keep.allocate({rows.count(), 1}, dtype);
  ops::linear_forward(ctx, x, params.moe.shared_expert_gate.value, saved.shared_gate_logit);
}

}  // namespace

double moe_block_forward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                         DecoderLayerActivations& saved, const Tensor& mlp_out) {
  const RoutedRows rows = routed_rows(run, saved.normed_mid.size(0));
  saved.moe_cu_seqlens = rows.part_of_bin ? clipped_cu_seqlens(run, rows) : Tensor{};
  const LayerRunContext routed = routed_context(run, rows, saved.moe_cu_seqlens);
  const Tensor x = saved.normed_mid.slice(rows.begin, rows.end);
  core::ArenaScope temporaries(*run.seam.scratch);
  const Tensor out = rows.sliced ? run.seam.scratch->allocate(x.shape(), x.dtype()) : mlp_out;
  // The shared expert reads only the block's input: under moe_shared_expert_overlap it runs
  // while the routed rows travel; its output joins after the un-permutation either way.
  const bool shared = params.moe.has_shared_expert;
  const bool shared_beside = shared && run.moe_shared_expert_overlap;
  const auto shared_expert = [&] { shared_expert_forward(routed, params, saved, rows, x); };
  const double aux_loss = routed_experts_forward(
      routed, layer, params, saved, x, out,
      shared_beside ? std::function<void()>(shared_expert) : std::function<void()>());
  if (shared) {
    // out += σ(u · w_sg) · SharedExpert(u)  (qwen-moe.md §3.8)
    if (!shared_beside) shared_expert();
    ops::sigmoid_row_gate_forward(run.seam.ops, saved.shared_out, saved.shared_gate_logit, out,
                                  GradMode::accumulate);
  }
  if (rows.sliced) TensorParallelRegion(run).all_gather_rows(out, mlp_out);
  return aux_loss;
}

namespace {

// dx [R, h] (overwrite) of the routed experts from dy [R, h], on the routed rows x.
void routed_experts_backward(const LayerRunContext& run, int layer,
                             const DecoderLayerParams& params, const DecoderLayerActivations& saved,
                             const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const DType dtype = dy.dtype();
  const auto& a = *run.architecture;
  const std::int64_t tokens = x.size(0), hidden = x.size(1), top_k = a.num_experts_per_tok;
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  core::ArenaScope temporaries(scratch);
  const std::int64_t assignments = tokens * top_k;
  const Tensor dy_perm = scratch.allocate({assignments, hidden}, dtype);
  const Tensor dweights = scratch.allocate({tokens, top_k}, dtype);
  ops::unpermute_backward(ctx, dy, saved.y_perm, saved.plan, saved.routing_weights, dy_perm,
                          dweights);
  const Tensor dx_perm = scratch.allocate({assignments, hidden}, dtype);
  run.seams.experts->backward(run.seam, layer, dy_perm, saved.plan.expert_offsets,
                              params.moe.experts, saved.experts, dx_perm);
  ops::permute_backward(ctx, dx_perm, saved.plan, dx);
  const Tensor dlogits = scratch.allocate({tokens, a.num_experts}, dtype);
  ops::router_backward(ctx, dweights, saved.expert_ids, saved.routing_weights, saved.router,
                       a.norm_topk_prob, dlogits);
  if (run.aux_loss != ops::MoeAuxLossType::none) {
    ops::moe_aux_loss_backward(ctx, saved.router.probs, run.cu_seqlens, run.token_is_real,
                               saved.aux_grad_coeff, dlogits, run.aux_loss_grad_scale);
  }
  ops::linear_backward(router_context(ctx), dlogits, x, params.moe.router.value, dx,
                       params.moe.router.grad, GradMode::accumulate);
}

// The shared expert's and its gate's part of the block's input gradient. On one rank it is
// added to dx; under tensor parallelism the SwiGLU's gradient covers every row and is summed
// over TP: with sequence parallelism reduce-scattered onto dx, else returned in `every_row`
// (all rows, not yet summed) with the gate's part left in dx.
void shared_expert_backward(const LayerRunContext& run, const DecoderLayerParams& params,
                            const DecoderLayerActivations& saved, RoutedRows rows,
                            const Tensor& normed_mid, const Tensor& x, const Tensor& dy,
                            const Tensor& dx, const Tensor& every_row) {
  const DType dtype = dy.dtype();
  core::Arena& scratch = *run.seam.scratch;
  const ops::OpContext& ctx = run.seam.ops;
  const TensorParallelRegion region(run);
  core::ArenaScope temporaries(scratch);
  const Tensor dshared = scratch.allocate(dy.shape(), dtype);
  const Tensor dgate_logit = scratch.allocate({rows.count(), 1}, dtype);
  ops::sigmoid_row_gate_backward(ctx, dy, saved.shared_out, saved.shared_gate_logit, dshared,
                                 dgate_logit);
  ops::linear_backward(ctx, dgate_logit, x, params.moe.shared_expert_gate.value, dx,
                       params.moe.shared_expert_gate.grad, GradMode::accumulate);
  if (!region.active()) {
    swiglu_mlp_backward(ctx, scratch, params.moe.shared_expert, dshared, normed_mid,
                        saved.shared_gate_up, saved.shared_hidden, dx, GradMode::accumulate);
    return;
  }
  // The forward cut the sum to the routed rows: every rank's rows of the gradient make up the
  // gradient of the sum, on every row.
  const Tensor block_input = region.gathered(normed_mid);
  const Tensor dsum = scratch.allocate({block_input.size(0), dy.size(1)}, dtype);
  region.all_gather_rows(dshared, dsum);
  const Tensor dinput = rows.sliced ? every_row : scratch.allocate(dsum.shape(), dtype);
  swiglu_mlp_backward(ctx, scratch, params.moe.shared_expert, dsum, block_input,
                      saved.shared_gate_up, saved.shared_hidden, dinput, GradMode::overwrite);
  if (rows.sliced) return;
  const Tensor summed = scratch.allocate(dx.shape(), dtype);
  region.sum_input_grad(dinput, summed);
  ops::add(ctx, dx, summed, dx);
}

}  // namespace

void moe_block_backward(const LayerRunContext& run, int layer, const DecoderLayerParams& params,
                        const DecoderLayerActivations& saved, const Tensor& normed_mid,
                        const Tensor& grad, const Tensor& dnormed_mid) {
  const RoutedRows rows = routed_rows(run, normed_mid.size(0));
  const LayerRunContext routed = routed_context(run, rows, saved.moe_cu_seqlens);
  const Tensor x = normed_mid.slice(rows.begin, rows.end);
  const Tensor dy = grad.slice(rows.begin, rows.end);
  core::Arena& scratch = *run.seam.scratch;
  core::ArenaScope temporaries(scratch);
  const Tensor dx = rows.sliced ? scratch.allocate(x.shape(), x.dtype()) : dnormed_mid;
  routed_experts_backward(routed, layer, params, saved, x, dy, dx);
  if (!rows.sliced) {
    if (params.moe.has_shared_expert)
      shared_expert_backward(routed, params, saved, rows, normed_mid, x, dy, dx, Tensor{});
    return;
  }
  // Without sequence parallelism every rank needs the gradient of every row: each rank's rows
  // of the routed part, plus the shared expert's partial sums, in one all-reduce.
  const TensorParallelRegion region(run);
  if (params.moe.has_shared_expert) {
    shared_expert_backward(routed, params, saved, rows, normed_mid, x, dy, dx, dnormed_mid);
  } else {
    dnormed_mid.fill_zero();
  }
  const Tensor own = dnormed_mid.slice(rows.begin, rows.end);
  ops::add(run.seam.ops, own, dx, own);
  region.all_reduce(dnormed_mid);
}

}  // namespace dyncp::model
