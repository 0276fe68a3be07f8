// CudaHybridOps: the hybrid layers' ops and the MoE aux loss on kernels/hybrid.hpp. These ops
// stay fp32 under bf16_mixed, as on the CPU (docs/precision.md): ctx.precision only changes
// matrix products and attention, and the chunk products of the gated delta rule (tensor cores
// on bf16 operands; the state and every element-wise factor stay fp32). Host metadata (cu_seqlens,
// each sequence's first chunk) is uploaded into scratch; the aux loss and a bad expert id come back
// in one synchronous copy.
#include "ops/cuda/cuda_hybrid_ops.hpp"

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "cuda_check.hpp"
#include "hybrid.hpp"
#include "ops/cuda/cuda_op_args.hpp"

namespace dyncp::ops::cuda {
namespace {

using core::DType;

const std::uint8_t* u8(const Tensor& t) {
  return t.defined() ? t.data<std::uint8_t>() : nullptr;
}

// A device copy of host i32 metadata, counted as host-to-device traffic.
const std::int32_t* upload_i32(core::Arena& scratch, const std::int32_t* host, std::int64_t n) {
  const Tensor device = scratch.allocate({n}, DType::i32);
  device.copy_from(Tensor::view_of(const_cast<std::int32_t*>(host), {n}, DType::i32));
  return device.data<std::int32_t>();
}

const std::int32_t* upload_i32(core::Arena& scratch, const Tensor& host) {
  return upload_i32(scratch, host.data<std::int32_t>(), host.numel());
}

std::int64_t rows_of(const Tensor& t) {
  const std::int64_t n = t.shape().last();
  return n == 0 ? 0 : t.numel() / n;
}

// The kernels' view of the rule's inputs; first_chunk (host) indexes chunk_states.
kernels::GatedDeltaRuleArgs rule_args(core::Arena& scratch, const GatedDeltaRuleInputs& in,
                                      const GatedDeltaRuleParams& params) {
  kernels::GatedDeltaRuleArgs args;
  args.q = f32(in.q);
  args.k = f32(in.k);
  args.v = f32(in.v);
  args.g = f32(in.g);
  args.beta = f32(in.beta);
  args.initial_state = f32(in.initial_state);
  args.sequences = in.cu_seqlens.numel() - 1;
  args.key_heads = in.q.size(1);
  args.key_dim = in.q.size(2);
  args.value_heads = in.v.size(1);
  args.value_dim = in.v.size(2);
  args.chunk = params.chunk_size;
  args.scale = static_cast<float>(params.scale);
  args.tokens = in.q.size(0);
  const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
  std::vector<std::int32_t> first(
      static_cast<std::size_t>(std::max<std::int64_t>(args.sequences, 1)));
  std::int64_t chunks = 0;
  for (std::int64_t s = 0; s < args.sequences; ++s) {
    first[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(chunks);
    chunks += (cu[s + 1] - cu[s] + params.chunk_size - 1) / params.chunk_size;
  }
  args.chunks = chunks;
  args.cu_seqlens = upload_i32(scratch, in.cu_seqlens);
  args.first_chunk = upload_i32(scratch, first.data(), static_cast<std::int64_t>(first.size()));
  return args;
}

// The device's gated delta rule is the chunked kernels pair; the token-by-token pair stays as
// the reference the tests and tools/gpu-check.sh compare against, chosen by the environment
// (DYNCP_GATED_DELTA_RULE_KERNEL=token; `chunked` or unset: the default). A chunk size above
// the chunked kernels' 64 also takes the token pair (the same function).
bool token_kernels(const GatedDeltaRuleParams& params) {
  constexpr const char* variable = "DYNCP_GATED_DELTA_RULE_KERNEL";
  const char* value = std::getenv(variable);
  const std::string choice = value == nullptr ? "" : value;
  if (choice == "token") return true;
  if (!choice.empty() && choice != "chunked") {
    core::throw_runtime_error(std::string(variable) + "=" + choice +
                              " is neither `chunked` (the default) nor `token`");
  }
  return params.chunk_size > 64;
}

// The walks uploaded, with the state dims of `states` [own, Hv, dk, dv].
kernels::SegmentWalks walks_of(core::Arena& scratch, const Tensor& segments, const Tensor& offsets,
                               std::int64_t first_own, std::int64_t end_own, const Tensor& states) {
  kernels::SegmentWalks walks;
  walks.segments = segments.numel() > 0 ? upload_i32(scratch, segments) : nullptr;
  walks.offsets = upload_i32(scratch, offsets);
  walks.count = offsets.numel() - 1;
  walks.first_own = first_own;
  walks.end_own = end_own;
  walks.heads = states.size(1);
  walks.key_dim = states.size(2);
  walks.value_dim = states.size(3);
  return walks;
}

}  // namespace

void CudaHybridOps::moe_aux_loss_statistics(const OpContext& ctx, const Tensor& probs,
                                            const Tensor& expert_ids, const Tensor& seq_cu_seqlens,
                                            const Tensor& token_is_real, const Tensor& counts,
                                            const Tensor& prob_sums, bool verify_expert_ids) {
  core::Arena& scratch = scratch_of(ctx, "moe_aux_loss_statistics");
  core::ArenaScope temporaries(scratch);
  std::int32_t* bad = verify_expert_ids ? device_scalar<std::int32_t>(scratch, INT32_MAX) : nullptr;
  kernels::moe_aux_loss_statistics(f32(probs), expert_ids.data<std::int32_t>(),
                                   upload_i32(scratch, seq_cu_seqlens), u8(token_is_real),
                                   f32(counts), f32(prob_sums), seq_cu_seqlens.numel() - 1,
                                   probs.size(1), expert_ids.size(1), bad, stream_of(ctx));
  if (!verify_expert_ids) return;
  const std::int32_t first_bad = read_back(bad);
  if (first_bad != INT32_MAX) {
    core::throw_runtime_error("moe_aux_loss_statistics: an expert id of token " +
                              std::to_string(first_bad) + " is outside [0, " +
                              std::to_string(probs.size(1)) + ")");
  }
}

double CudaHybridOps::moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts,
                                          const Tensor& prob_sums, int top_k, double coef,
                                          std::int64_t num_sequences_global,
                                          const Tensor& grad_coeff) {
  core::Arena& scratch = scratch_of(ctx, "moe_aux_loss_finish");
  core::ArenaScope temporaries(scratch);
  const std::int64_t sequences = counts.size(0);
  // doubles as pairs of i32 slots: [sequences] per-sequence losses, then the total
  const Tensor sums = scratch.allocate({2 * (sequences + 1)}, DType::i32);
  double* per_sequence = static_cast<double*>(sums.raw_data());
  kernels::moe_aux_loss_finish(f32(counts), f32(prob_sums), sequences, counts.size(1), top_k,
                               coef / static_cast<double>(num_sequences_global), f32(grad_coeff),
                               per_sequence, per_sequence + sequences, stream_of(ctx));
  return read_back(per_sequence + sequences);
}

void CudaHybridOps::moe_aux_loss_backward(const OpContext& ctx, const Tensor& probs,
                                          const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                                          const Tensor& grad_coeff, const Tensor& dlogits,
                                          double loss_scale) {
  core::Arena& scratch = scratch_of(ctx, "moe_aux_loss_backward");
  core::ArenaScope temporaries(scratch);
  kernels::moe_aux_loss_backward(f32(probs), upload_i32(scratch, seq_cu_seqlens), u8(token_is_real),
                                 f32(grad_coeff), f32(dlogits), seq_cu_seqlens.numel() - 1,
                                 probs.size(1), static_cast<float>(loss_scale), stream_of(ctx));
}

void CudaHybridOps::sigmoid_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                                         const Tensor& out) {
  kernels::sigmoid_gate_forward(f32(x), f32(gate), f32(out), x.numel(), stream_of(ctx));
}

void CudaHybridOps::sigmoid_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                                          const Tensor& gate, const Tensor& dx,
                                          const Tensor& dgate) {
  kernels::sigmoid_gate_backward(f32(dout), f32(x), f32(gate), f32(dx), f32(dgate), x.numel(),
                                 stream_of(ctx));
}

void CudaHybridOps::sigmoid_row_gate_forward(const OpContext& ctx, const Tensor& x,
                                             const Tensor& gate, const Tensor& out,
                                             GradMode out_mode) {
  kernels::sigmoid_row_gate_forward(f32(x), f32(gate), f32(out), rows_of(x), x.shape().last(),
                                    out_mode == GradMode::accumulate, stream_of(ctx));
}

void CudaHybridOps::sigmoid_row_gate_backward(const OpContext& ctx, const Tensor& dout,
                                              const Tensor& x, const Tensor& gate, const Tensor& dx,
                                              const Tensor& dgate) {
  kernels::sigmoid_row_gate_backward(f32(dout), f32(x), f32(gate), f32(dx), f32(dgate), rows_of(x),
                                     x.shape().last(), stream_of(ctx));
}

void CudaHybridOps::head_halves(const OpContext& ctx, const Tensor& packed, const Tensor& first,
                                const Tensor& second, bool to_halves) {
  if (to_halves) {
    kernels::split_head_halves(f32(packed), f32(first), f32(second), rows_of(first),
                               first.shape().last(), stream_of(ctx));
  } else {
    kernels::merge_head_halves(f32(first), f32(second), f32(packed), rows_of(first),
                               first.shape().last(), stream_of(ctx));
  }
}

void CudaHybridOps::gated_delta_gates_forward(const OpContext& ctx, const Tensor& a,
                                              const Tensor& b, const Tensor& A_log,
                                              const Tensor& dt_bias, const Tensor& g,
                                              const Tensor& beta) {
  kernels::gated_delta_gates_forward(f32(a), f32(b), f32(A_log), f32(dt_bias), f32(g), f32(beta),
                                     a.size(0), a.size(1), stream_of(ctx));
}

void CudaHybridOps::gated_delta_gates_backward(const OpContext& ctx, const Tensor& dg,
                                               const Tensor& dbeta, const Tensor& a,
                                               const Tensor& b, const Tensor& A_log,
                                               const Tensor& dt_bias, const Tensor& da,
                                               const Tensor& db, const Tensor& dA_log,
                                               const Tensor& ddt_bias) {
  kernels::gated_delta_gates_backward(f32(dg), f32(dbeta), f32(a), f32(b), f32(A_log), f32(dt_bias),
                                      f32(da), f32(db), f32(dA_log), f32(ddt_bias), a.size(0),
                                      a.size(1), stream_of(ctx));
}

void CudaHybridOps::causal_conv1d_silu_forward(const OpContext& ctx, const Tensor& x,
                                               const Tensor& weight, const Tensor& cu_seqlens,
                                               const Tensor& y) {
  core::Arena& scratch = scratch_of(ctx, "causal_conv1d_silu_forward");
  core::ArenaScope temporaries(scratch);
  kernels::causal_conv1d_silu_forward(f32(x), f32(weight), upload_i32(scratch, cu_seqlens), f32(y),
                                      cu_seqlens.numel() - 1, x.size(0), x.size(1), weight.size(1),
                                      stream_of(ctx));
}

void CudaHybridOps::causal_conv1d_silu_backward(const OpContext& ctx, const Tensor& dy,
                                                const Tensor& x, const Tensor& weight,
                                                const Tensor& cu_seqlens, const Tensor& dx,
                                                const Tensor& dweight) {
  core::Arena& scratch = scratch_of(ctx, "causal_conv1d_silu_backward");
  core::ArenaScope temporaries(scratch);
  const Tensor dpre = scratch.allocate(x.shape(), DType::f32);
  kernels::causal_conv1d_silu_backward(
      f32(dy), f32(x), f32(weight), upload_i32(scratch, cu_seqlens), f32(dx), f32(dweight),
      f32(dpre), cu_seqlens.numel() - 1, x.size(0), x.size(1), weight.size(1), stream_of(ctx));
}

void CudaHybridOps::l2norm_forward(const OpContext& ctx, const Tensor& x, double eps,
                                   const Tensor& y, L2NormSaved& saved) {
  kernels::l2norm_forward(f32(x), static_cast<float>(eps), f32(y), f32(saved.inv_norm), rows_of(x),
                          x.shape().last(), stream_of(ctx));
}

void CudaHybridOps::l2norm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y,
                                    const L2NormSaved& saved, const Tensor& dx) {
  kernels::l2norm_backward(f32(dy), f32(y), f32(saved.inv_norm), f32(dx), rows_of(y),
                           y.shape().last(), stream_of(ctx));
}

void CudaHybridOps::gated_rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& z,
                                          const Tensor& weight, double eps, const Tensor& y,
                                          RmsNormSaved& saved) {
  if (x.dtype() == core::DType::bf16) {  // bf16 activations' kept rule output and z
    kernels::gated_rmsnorm_forward(static_cast<const kernels::bf16*>(x.raw_data()),
                                   static_cast<const kernels::bf16*>(z.raw_data()), f32(weight),
                                   static_cast<float>(eps), f32(y), f32(saved.inv_rms), rows_of(x),
                                   x.shape().last(), stream_of(ctx));
    return;
  }
  kernels::gated_rmsnorm_forward(f32(x), f32(z), f32(weight), static_cast<float>(eps), f32(y),
                                 f32(saved.inv_rms), rows_of(x), x.shape().last(), stream_of(ctx));
}

void CudaHybridOps::gated_rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                           const Tensor& z, const Tensor& weight,
                                           const RmsNormSaved& saved, const Tensor& dx,
                                           const Tensor& dz, const Tensor& dweight) {
  if (x.dtype() == core::DType::bf16) {  // bf16 activations' kept rule output and z
    kernels::gated_rmsnorm_backward(f32(dy), static_cast<const kernels::bf16*>(x.raw_data()),
                                    static_cast<const kernels::bf16*>(z.raw_data()), f32(weight),
                                    f32(saved.inv_rms), f32(dx), f32(dz), f32(dweight), rows_of(x),
                                    x.shape().last(), stream_of(ctx));
    return;
  }
  kernels::gated_rmsnorm_backward(f32(dy), f32(x), f32(z), f32(weight), f32(saved.inv_rms), f32(dx),
                                  f32(dz), f32(dweight), rows_of(x), x.shape().last(),
                                  stream_of(ctx));
}

void CudaHybridOps::gated_delta_rule_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                             const GatedDeltaRuleParams& params, const Tensor& out,
                                             const Tensor& final_state,
                                             GatedDeltaRuleSaved& saved) {
  core::Arena& scratch = scratch_of(ctx, "gated_delta_rule_forward");
  core::ArenaScope temporaries(scratch);
  kernels::GatedDeltaRuleArgs args = rule_args(scratch, in, params);
  if (token_kernels(params)) {
    kernels::gated_delta_rule_forward(args, f32(out), f32(final_state), f32(saved.chunk_states),
                                      stream_of(ctx));
    return;
  }
  args.tensor_cores = ctx.precision == ComputePrecision::bf16;
  const Tensor work =
      scratch.allocate({kernels::gated_delta_rule_chunked_forward_scratch(args)}, DType::f32);
  kernels::gated_delta_rule_chunked_forward(args, f32(out), f32(final_state),
                                            f32(saved.chunk_states), f32(work), stream_of(ctx));
}

void CudaHybridOps::gated_delta_rule_backward(const OpContext& ctx, const Tensor& dout,
                                              const Tensor& d_final_state,
                                              const GatedDeltaRuleInputs& in,
                                              const GatedDeltaRuleParams& params,
                                              const GatedDeltaRuleSaved& saved,
                                              const GatedDeltaRuleGrads& grads) {
  core::Arena& scratch = scratch_of(ctx, "gated_delta_rule_backward");
  core::ArenaScope temporaries(scratch);
  kernels::GatedDeltaRuleArgs args = rule_args(scratch, in, params);
  const bool token = token_kernels(params);
  args.tensor_cores = !token && ctx.precision == ComputePrecision::bf16;
  const cudaStream_t stream = stream_of(ctx);
  Tensor chunk_states = saved.chunk_states;
  if (!chunk_states.defined()) {
    // Forward kept no chunk states: one state-only pass recomputes them.
    chunk_states =
        scratch.allocate({args.chunks, args.value_heads, args.key_dim, args.value_dim}, DType::f32);
    core::ArenaScope pass(scratch);
    if (token) {
      kernels::gated_delta_rule_forward(args, nullptr, nullptr, f32(chunk_states), stream);
    } else {
      const Tensor work =
          scratch.allocate({kernels::gated_delta_rule_chunked_forward_scratch(args)}, DType::f32);
      kernels::gated_delta_rule_chunked_forward(args, nullptr, nullptr, f32(chunk_states),
                                                f32(work), stream);
    }
  }
  const std::int64_t tokens = in.q.size(0);
  if (!token) {
    const Tensor work =
        scratch.allocate({kernels::gated_delta_rule_chunked_backward_scratch(args)}, DType::f32);
    kernels::gated_delta_rule_chunked_backward(args, f32(chunk_states), f32(dout),
                                               f32(d_final_state), f32(grads.dq), f32(grads.dk),
                                               f32(grads.dv), f32(grads.dg), f32(grads.dbeta),
                                               f32(grads.d_initial_state), f32(work), stream);
    return;
  }
  const Tensor work =
      scratch.allocate({kernels::gated_delta_rule_backward_scratch(args, tokens)}, DType::f32);
  kernels::gated_delta_rule_backward(args, tokens, f32(chunk_states), f32(dout), f32(d_final_state),
                                     f32(grads.dq), f32(grads.dk), f32(grads.dv), f32(grads.dg),
                                     f32(grads.dbeta), f32(grads.d_initial_state), f32(work),
                                     stream);
}

void CudaHybridOps::compose_segment_prefixes(const OpContext& ctx, const Tensor& transitions,
                                             const Tensor& walk_segments,
                                             const Tensor& walk_offsets, std::int64_t first_own,
                                             std::int64_t end_own, const Tensor& initial_states) {
  core::Arena& scratch = scratch_of(ctx, "compose_segment_prefixes");
  core::ArenaScope temporaries(scratch);
  kernels::SegmentWalks walks =
      walks_of(scratch, walk_segments, walk_offsets, first_own, end_own, initial_states);
  const Tensor work = scratch.allocate({kernels::segment_walk_scratch(walks)}, DType::f64);
  kernels::compose_segment_prefixes(walks, f32(transitions), f32(initial_states),
                                    work.data<double>(), stream_of(ctx));
}

void CudaHybridOps::compose_segment_suffixes(const OpContext& ctx, const Tensor& transitions,
                                             const Tensor& state_grads, const Tensor& walk_segments,
                                             const Tensor& walk_offsets, std::int64_t first_own,
                                             std::int64_t end_own, const Tensor& final_grads) {
  core::Arena& scratch = scratch_of(ctx, "compose_segment_suffixes");
  core::ArenaScope temporaries(scratch);
  kernels::SegmentWalks walks =
      walks_of(scratch, walk_segments, walk_offsets, first_own, end_own, final_grads);
  const Tensor work = scratch.allocate({kernels::segment_walk_scratch(walks)}, DType::f64);
  kernels::compose_segment_suffixes(walks, f32(transitions), f32(state_grads), f32(final_grads),
                                    work.data<double>(), stream_of(ctx));
}

void CudaHybridOps::segment_state_grads(const OpContext& ctx, const Tensor& query_maps,
                                        const Tensor& dout, const Tensor& cu_seqlens,
                                        const Tensor& grads) {
  core::Arena& scratch = scratch_of(ctx, "segment_state_grads");
  core::ArenaScope temporaries(scratch);
  kernels::segment_state_grads(f32(query_maps), f32(dout), upload_i32(scratch, cu_seqlens),
                               f32(grads), grads.size(0), grads.size(1), grads.size(2),
                               grads.size(3), stream_of(ctx));
}

void CudaHybridOps::copy_columns(const OpContext& ctx, const Tensor& src, std::int64_t src_col,
                                 const Tensor& dst, std::int64_t dst_col, std::int64_t width) {
  kernels::copy_columns(f32(src) + src_col, src.size(1), f32(dst) + dst_col, dst.size(1),
                        src.size(0), width, stream_of(ctx));
}

void CudaHybridOps::set_identity_columns(const OpContext& ctx, const Tensor& t, std::int64_t col) {
  kernels::set_identity_columns(f32(t), t.size(0), t.size(1), t.size(2), col, stream_of(ctx));
}

}  // namespace dyncp::ops::cuda
