// Chunked (WY / UT-transform) gated delta rule: the training form, looping over sequences, heads
// and chunks; the per-chunk maths is in gated_delta_rule_chunk_cpu.cpp, formulas in the header.

#include <algorithm>
#include <cmath>
#include <string>

#include "core/arena.hpp"
#include "ops/device_ops.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_delta_rule_chunk.hpp"
#include "ops/gated_delta_rule_common.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

template <typename T>
detail::ChunkRows<T> head_rows(const GatedDeltaRuleInputs& in,
                               const detail::GatedDeltaRuleDims& dims, std::int64_t token,
                               std::int64_t head) {
  const std::int64_t kh = head / dims.heads_per_key;
  const std::int64_t hk = dims.key_heads, hv = dims.value_heads;
  return {in.q.data<T>() + (token * hk + kh) * dims.key_dim,
          in.k.data<T>() + (token * hk + kh) * dims.key_dim,
          in.v.data<T>() + (token * hv + head) * dims.value_dim,
          in.g.data<T>() + token * hv + head,
          in.beta.data<T>() + token * hv + head,
          hk * dims.key_dim,
          hv * dims.value_dim,
          hv};
}

template <typename T>
void load_initial_state(const GatedDeltaRuleInputs& in, std::int64_t state_index,
                        std::int64_t state_size, T* state) {
  if (in.initial_state.defined()) {
    const T* init = in.initial_state.data<T>() + state_index * state_size;
    std::copy(init, init + state_size, state);
  } else {
    std::fill(state, state + state_size, T(0));
  }
}

}  // namespace

std::int64_t gated_delta_rule_num_chunks(const Tensor& cu_seqlens, int chunk_size) {
  constexpr std::string_view op = "gated_delta_rule_num_chunks";
  detail::require_dtype(op, "cu_seqlens", cu_seqlens, DType::i32);
  detail::require_rank(op, "cu_seqlens", cu_seqlens, 1);
  if (chunk_size < 1)
    detail::fail(op, "chunk_size must be >= 1, got " + std::to_string(chunk_size));
  const std::int32_t* cu = cu_seqlens.data<std::int32_t>();
  std::int64_t chunks = 0;
  for (std::int64_t s = 0; s + 1 < cu_seqlens.size(0); ++s) {
    const std::int64_t length = cu[s + 1] - cu[s];
    if (length < 0) detail::fail(op, "cu_seqlens must be non-decreasing");
    chunks += (length + chunk_size - 1) / chunk_size;
  }
  return chunks;
}

void gated_delta_rule_chunked_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                      const GatedDeltaRuleParams& params, const Tensor& out,
                                      const Tensor& final_state, GatedDeltaRuleSaved& saved) {
  constexpr std::string_view op = "gated_delta_rule_chunked_forward";
  const auto dims = detail::check_gated_delta_rule_inputs(op, ctx, in, params, true);
  detail::check_gated_delta_rule_outputs(op, ctx, in, dims, out, final_state);
  const std::int64_t chunk = params.chunk_size;
  if (saved.chunk_states.defined()) {
    detail::require_float_operands_on_any_device(
        op, ctx, {{"q", &in.q}, {"saved.chunk_states", &saved.chunk_states}});
    detail::require_shape(op, "saved.chunk_states", saved.chunk_states,
                          Shape{gated_delta_rule_num_chunks(in.cu_seqlens, params.chunk_size),
                                dims.value_heads, dims.key_dim, dims.value_dim});
  }
  core::Arena& arena = *ctx.scratch;
  const core::ArenaScope scope(arena);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_rule_forward(ctx, in, params, out, final_state,
                                                           saved);
  detail::dispatch_float(op, in.q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t dk = dims.key_dim, dv = dims.value_dim, hv = dims.value_heads,
                       state_size = dk * dv;
    const std::int64_t work_chunk =
        std::min(chunk, std::max<std::int64_t>(dims.max_sequence_length, 1));
    auto work = detail::ChunkWorkspace<T>::allocate(arena, work_chunk, dk, dv, false);
    T* state = arena.allocate(Shape{state_size}, in.q.dtype()).data<T>();
    const T scale = static_cast<T>(params.scale);
    const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
    T* saved_states = saved.chunk_states.defined() ? saved.chunk_states.data<T>() : nullptr;
    std::int64_t first_chunk = 0;  // index of the sequence's first chunk in chunk_states
    for (std::int64_t s = 0; s < dims.sequences; ++s) {
      const std::int64_t begin = cu[s], end = cu[s + 1];
      for (std::int64_t h = 0; h < hv; ++h) {
        load_initial_state(in, s * hv + h, state_size, state);
        std::int64_t chunk_index = first_chunk;
        for (std::int64_t t0 = begin; t0 < end; t0 += chunk, ++chunk_index) {
          if (saved_states != nullptr) {
            std::copy(state, state + state_size,
                      saved_states + (chunk_index * hv + h) * state_size);
          }
          const std::int64_t c = std::min(chunk, end - t0);
          detail::chunk_forward(head_rows<T>(in, dims, t0, h), c, scale, state,
                                out.data<T>() + (t0 * hv + h) * dv, hv * dv, work);
        }
        if (final_state.defined())
          std::copy(state, state + state_size, final_state.data<T>() + (s * hv + h) * state_size);
      }
      first_chunk += (end - begin + chunk - 1) / chunk;
    }
  });
}

void gated_delta_rule_chunked_backward(const OpContext& ctx, const Tensor& dout,
                                       const Tensor& d_final_state, const GatedDeltaRuleInputs& in,
                                       const GatedDeltaRuleParams& params,
                                       const GatedDeltaRuleSaved& saved,
                                       const GatedDeltaRuleGrads& grads) {
  constexpr std::string_view op = "gated_delta_rule_chunked_backward";
  const auto dims = detail::check_gated_delta_rule_inputs(op, ctx, in, params, true);
  detail::check_gated_delta_rule_grads(op, ctx, in, dims, dout, d_final_state, grads);
  const std::int64_t chunk = params.chunk_size;
  if (saved.chunk_states.defined()) {
    detail::require_float_operands_on_any_device(
        op, ctx, {{"q", &in.q}, {"saved.chunk_states", &saved.chunk_states}});
    detail::require_shape(op, "saved.chunk_states", saved.chunk_states,
                          Shape{gated_delta_rule_num_chunks(in.cu_seqlens, params.chunk_size),
                                dims.value_heads, dims.key_dim, dims.value_dim});
  }
  core::Arena& arena = *ctx.scratch;
  const core::ArenaScope scope(arena);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_rule_backward(ctx, dout, d_final_state, in, params,
                                                            saved, grads);
  detail::dispatch_float(op, in.q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const DType dtype = in.q.dtype();
    const std::int64_t dk = dims.key_dim, dv = dims.value_dim, hk = dims.key_heads,
                       hv = dims.value_heads, state_size = dk * dv;
    const std::int64_t longest = std::max<std::int64_t>(dims.max_sequence_length, 1);
    const std::int64_t work_chunk = std::min(chunk, longest);
    const bool recompute = !saved.chunk_states.defined();
    // Incoming states of one (sequence, head)'s chunks, when forward did not keep them.
    T* head_states =
        recompute
            ? arena.allocate(Shape{((longest + chunk - 1) / chunk) * state_size}, dtype).data<T>()
            : nullptr;
    auto work = detail::ChunkWorkspace<T>::allocate(arena, work_chunk, dk, dv, true);
    T* d_state = arena.allocate(Shape{state_size}, dtype).data<T>();
    const bool want_inputs = grads.dq.defined();
    const T scale = static_cast<T>(params.scale);
    const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
    const T* d_out = dout.data<T>();
    if (want_inputs) {
      grads.dq.fill_zero();
      grads.dk.fill_zero();
    }
    std::int64_t first_chunk = 0;
    for (std::int64_t s = 0; s < dims.sequences; ++s) {
      const std::int64_t begin = cu[s], end = cu[s + 1];
      const std::int64_t num_chunks = (end - begin + chunk - 1) / chunk;
      for (std::int64_t h = 0; h < hv; ++h) {
        const std::int64_t kh = h / dims.heads_per_key, state_index = s * hv + h;
        // The state entering chunk ci is incoming + ci · incoming_stride.
        const T* incoming = nullptr;
        std::int64_t incoming_stride = state_size;
        if (recompute) {
          load_initial_state(in, state_index, state_size, d_state);  // d_state as a temporary
          for (std::int64_t ci = 0; ci < num_chunks; ++ci) {
            const std::int64_t t0 = begin + ci * chunk;
            std::copy(d_state, d_state + state_size, head_states + ci * state_size);
            detail::chunk_forward(head_rows<T>(in, dims, t0, h), std::min(chunk, end - t0), scale,
                                  d_state, static_cast<T*>(nullptr), 0, work);
          }
          incoming = head_states;
        } else {
          incoming = saved.chunk_states.data<T>() + (first_chunk * hv + h) * state_size;
          incoming_stride = hv * state_size;
        }
        if (d_final_state.defined()) {
          const T* d_final = d_final_state.data<T>() + state_index * state_size;
          std::copy(d_final, d_final + state_size, d_state);
        } else {
          std::fill(d_state, d_state + state_size, T(0));
        }
        for (std::int64_t ci = num_chunks - 1; ci >= 0; --ci) {
          const std::int64_t t0 = begin + ci * chunk, c = std::min(chunk, end - t0);
          detail::ChunkGradRows<T> rows{};
          if (want_inputs) {
            rows.dq = grads.dq.data<T>() + (t0 * hk + kh) * dk;
            rows.dk = grads.dk.data<T>() + (t0 * hk + kh) * dk;
            rows.dv = grads.dv.data<T>() + (t0 * hv + h) * dv;
            rows.dg = grads.dg.data<T>() + t0 * hv + h;
            rows.dbeta = grads.dbeta.data<T>() + t0 * hv + h;
          }
          detail::chunk_backward(head_rows<T>(in, dims, t0, h), c, scale,
                                 incoming + ci * incoming_stride, d_out + (t0 * hv + h) * dv,
                                 hv * dv, d_state, rows, work);
        }
        if (grads.d_initial_state.defined()) {
          std::copy(d_state, d_state + state_size,
                    grads.d_initial_state.data<T>() + state_index * state_size);
        }
      }
      first_chunk += num_chunks;
    }
  });
}

}  // namespace dyncp::ops
