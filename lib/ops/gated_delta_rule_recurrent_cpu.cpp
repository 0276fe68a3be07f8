// Token-by-token gated delta rule: the reference the chunked form is tested against.

#include <algorithm>
#include <string>

#include "core/arena.hpp"
#include "ops/device_ops.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_delta_rule_common.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

// On the device both forms run the same token-by-token kernels; the chunk size only sets how
// often the backward's checkpoints are taken.
GatedDeltaRuleParams recurrent_on_device(const GatedDeltaRuleParams& params) {
  GatedDeltaRuleParams device = params;
  device.chunk_size = GatedDeltaRuleParams{}.chunk_size;
  return device;
}

GatedDeltaRuleSaved& no_saved_states() {
  thread_local GatedDeltaRuleSaved none;
  none = {};
  return none;
}

}  // namespace

void gated_delta_rule_recurrent_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                        const GatedDeltaRuleParams& params, const Tensor& out,
                                        const Tensor& final_state) {
  constexpr std::string_view op = "gated_delta_rule_recurrent_forward";
  const auto dims = detail::check_gated_delta_rule_inputs(op, ctx, in, params, false);
  detail::check_gated_delta_rule_outputs(op, ctx, in, dims, out, final_state);
  core::Arena& arena = *ctx.scratch;
  const core::ArenaScope scope(arena);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_rule_forward(ctx, in, recurrent_on_device(params),
                                                           out, final_state, no_saved_states());
  detail::dispatch_float(op, in.q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t dk = dims.key_dim, dv = dims.value_dim, hk = dims.key_heads,
                       hv = dims.value_heads, state_size = dk * dv;
    T* state = arena.allocate(Shape{state_size}, in.q.dtype()).data<T>();
    T* delta = arena.allocate(Shape{dv}, in.q.dtype()).data<T>();
    const T scale = static_cast<T>(params.scale);
    const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
    const T *q = in.q.data<T>(), *k = in.k.data<T>(), *v = in.v.data<T>(), *g = in.g.data<T>(),
            *beta = in.beta.data<T>();
    T* o = out.data<T>();
    for (std::int64_t s = 0; s < dims.sequences; ++s) {
      for (std::int64_t h = 0; h < hv; ++h) {
        const std::int64_t kh = h / dims.heads_per_key, state_index = s * hv + h;
        if (in.initial_state.defined()) {
          const T* init = in.initial_state.data<T>() + state_index * state_size;
          std::copy(init, init + state_size, state);
        } else {
          std::fill(state, state + state_size, T(0));
        }
        for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
          detail::gdn_token_forward(state, dk, dv, q + (t * hk + kh) * dk, k + (t * hk + kh) * dk,
                                    v + (t * hv + h) * dv, g[t * hv + h], beta[t * hv + h], scale,
                                    o + (t * hv + h) * dv, delta);
        }
        if (final_state.defined())
          std::copy(state, state + state_size, final_state.data<T>() + state_index * state_size);
      }
    }
  });
}

void gated_delta_rule_recurrent_backward(const OpContext& ctx, const Tensor& dout,
                                         const Tensor& d_final_state,
                                         const GatedDeltaRuleInputs& in,
                                         const GatedDeltaRuleParams& params,
                                         const GatedDeltaRuleGrads& grads) {
  constexpr std::string_view op = "gated_delta_rule_recurrent_backward";
  const auto dims = detail::check_gated_delta_rule_inputs(op, ctx, in, params, false);
  detail::check_gated_delta_rule_grads(op, ctx, in, dims, dout, d_final_state, grads);
  core::Arena& arena = *ctx.scratch;
  const core::ArenaScope scope(arena);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).gated_delta_rule_backward(ctx, dout, d_final_state, in,
                                                            recurrent_on_device(params), {}, grads);
  detail::dispatch_float(op, in.q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const DType dtype = in.q.dtype();
    const std::int64_t dk = dims.key_dim, dv = dims.value_dim, hk = dims.key_heads,
                       hv = dims.value_heads, state_size = dk * dv;
    // Every state S_0 .. S_L of one (sequence, head).
    T* states = arena.allocate(Shape{(dims.max_sequence_length + 1) * state_size}, dtype).data<T>();
    T* d_state = arena.allocate(Shape{state_size}, dtype).data<T>();
    T* work = arena.allocate(Shape{3 * dv}, dtype).data<T>();
    // Sinks for the per-token gradients when only d_initial_state is wanted.
    T* sink = arena.allocate(Shape{2 * dk + dv}, dtype).data<T>();
    const bool want_inputs = grads.dq.defined();
    const T scale = static_cast<T>(params.scale);
    const std::int32_t* cu = in.cu_seqlens.data<std::int32_t>();
    const T *q = in.q.data<T>(), *k = in.k.data<T>(), *v = in.v.data<T>(), *g = in.g.data<T>(),
            *beta = in.beta.data<T>(), *d_out = dout.data<T>();
    if (want_inputs) {
      grads.dq.fill_zero();
      grads.dk.fill_zero();
    }
    for (std::int64_t s = 0; s < dims.sequences; ++s) {
      for (std::int64_t h = 0; h < hv; ++h) {
        const std::int64_t kh = h / dims.heads_per_key, state_index = s * hv + h;
        const std::int64_t begin = cu[s], length = cu[s + 1] - cu[s];
        if (in.initial_state.defined()) {
          const T* init = in.initial_state.data<T>() + state_index * state_size;
          std::copy(init, init + state_size, states);
        } else {
          std::fill(states, states + state_size, T(0));
        }
        for (std::int64_t i = 0; i < length; ++i) {
          const std::int64_t t = begin + i;
          T* next = states + (i + 1) * state_size;
          std::copy(states + i * state_size, states + (i + 1) * state_size, next);
          detail::gdn_token_forward(next, dk, dv, q + (t * hk + kh) * dk, k + (t * hk + kh) * dk,
                                    v + (t * hv + h) * dv, g[t * hv + h], beta[t * hv + h], scale,
                                    static_cast<T*>(nullptr), work);
        }
        if (d_final_state.defined()) {
          const T* d_final = d_final_state.data<T>() + state_index * state_size;
          std::copy(d_final, d_final + state_size, d_state);
        } else {
          std::fill(d_state, d_state + state_size, T(0));
        }
        for (std::int64_t i = length - 1; i >= 0; --i) {
          const std::int64_t t = begin + i;
          detail::GdnTokenGrads<T> token{sink, sink + dk, sink + 2 * dk};
          if (want_inputs) {
            token.dq = grads.dq.data<T>() + (t * hk + kh) * dk;
            token.dk = grads.dk.data<T>() + (t * hk + kh) * dk;
            token.dv = grads.dv.data<T>() + (t * hv + h) * dv;
          }
          detail::gdn_token_backward(
              states + i * state_size, states + (i + 1) * state_size, d_state, dk, dv,
              q + (t * hk + kh) * dk, k + (t * hk + kh) * dk, v + (t * hv + h) * dv, g[t * hv + h],
              beta[t * hv + h], scale, d_out + (t * hv + h) * dv, token, work);
          if (want_inputs) {
            grads.dg.data<T>()[t * hv + h] = token.dg;
            grads.dbeta.data<T>()[t * hv + h] = token.dbeta;
          }
        }
        if (grads.d_initial_state.defined()) {
          std::copy(d_state, d_state + state_size,
                    grads.d_initial_state.data<T>() + state_index * state_size);
        }
      }
    }
  });
}

}  // namespace dyncp::ops
