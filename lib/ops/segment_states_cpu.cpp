#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"
#include "ops/segment_states.hpp"

namespace dyncp::ops {
namespace {

struct Walks {
  const std::int32_t* segments;
  const std::int32_t* offsets;
  std::int64_t count;
};

Walks check_walks(std::string_view op, const Tensor& segments, const Tensor& offsets,
                  std::int64_t segment_count) {
  detail::require_dtype(op, "walk_segments", segments, DType::i32);
  detail::require_dtype(op, "walk_offsets", offsets, DType::i32);
  if (segments.device() != Device::cpu || offsets.device() != Device::cpu)
    detail::fail(op, "the walks must be on the host");
  const std::int32_t* o = offsets.data<std::int32_t>();
  const std::int64_t count = offsets.numel() - 1;
  if (count < 0 || o[0] != 0 || o[count] != segments.numel())
    detail::fail(op, "walk_offsets must run from 0 to the number of walk_segments");
  const std::int32_t* s = segments.data<std::int32_t>();
  for (std::int64_t i = 0; i < segments.numel(); ++i) {
    if (s[i] < 0 || s[i] >= segment_count)
      detail::fail(op, "walk segment " + std::to_string(s[i]) + " is outside the transitions");
  }
  return {s, o, count};
}

// [segments, Hv, dk, dv + dk] against states [own, Hv, dk, dv]; returns (heads, dk, dv).
struct StateDims {
  std::int64_t heads, dk, dv;
};

StateDims check_states(std::string_view op, const Tensor& transitions, const Tensor& states,
                       std::int64_t first_own, std::int64_t end_own) {
  detail::require_rank(op, "transitions", transitions, 4);
  detail::require_rank(op, "states", states, 4);
  const StateDims d{states.size(1), states.size(2), states.size(3)};
  detail::require_shape(op, "transitions", transitions,
                        Shape{transitions.size(0), d.heads, d.dk, d.dv + d.dk});
  if (first_own < 0 || end_own < first_own || end_own > transitions.size(0) ||
      states.size(0) != end_own - first_own)
    detail::fail(op, "own segments [" + std::to_string(first_own) + ", " + std::to_string(end_own) +
                         ") do not match states " + states.describe());
  return d;
}

template <typename T>
void compose_prefixes(const T* transitions, const Walks& walks, std::int64_t first_own,
                      std::int64_t end_own, const StateDims& d, T* initial) {
  const std::int64_t width = d.dv + d.dk, per_head = d.dk * d.dv;
  std::vector<double> state(static_cast<std::size_t>(d.heads * per_head));
  std::vector<double> next(state.size());
  for (std::int64_t w = 0; w < walks.count; ++w) {
    std::fill(state.begin(), state.end(), 0.0);
    for (std::int64_t i = walks.offsets[w]; i < walks.offsets[w + 1]; ++i) {
      const std::int64_t g = walks.segments[i];
      if (g >= first_own && g < end_own) {
        T* dst = initial + (g - first_own) * d.heads * per_head;
        for (std::size_t j = 0; j < state.size(); ++j) dst[j] = static_cast<T>(state[j]);
      }
      if (i + 1 == walks.offsets[w + 1]) break;
      for (std::int64_t h = 0; h < d.heads; ++h) {
        const T* fp = transitions + (g * d.heads + h) * d.dk * width;
        const double* s = state.data() + h * per_head;
        double* n = next.data() + h * per_head;
        for (std::int64_t a = 0; a < d.dk; ++a) {
          const T* row = fp + a * width;
          for (std::int64_t col = 0; col < d.dv; ++col) n[a * d.dv + col] = row[col];
          for (std::int64_t b = 0; b < d.dk; ++b) {
            const double p = row[d.dv + b];
            for (std::int64_t col = 0; col < d.dv; ++col)
              n[a * d.dv + col] += p * s[b * d.dv + col];
          }
        }
      }
      state.swap(next);
    }
  }
}

template <typename T>
void compose_suffixes(const T* transitions, const T* state_grads, const Walks& walks,
                      std::int64_t first_own, std::int64_t end_own, const StateDims& d,
                      T* final_grads) {
  const std::int64_t width = d.dv + d.dk, per_head = d.dk * d.dv;
  std::vector<double> grad(static_cast<std::size_t>(d.heads * per_head));
  std::vector<double> prev(grad.size());
  for (std::int64_t w = 0; w < walks.count; ++w) {
    std::fill(grad.begin(), grad.end(), 0.0);
    for (std::int64_t i = walks.offsets[w]; i < walks.offsets[w + 1]; ++i) {
      const std::int64_t g = walks.segments[i];
      if (g >= first_own && g < end_own) {
        T* dst = final_grads + (g - first_own) * d.heads * per_head;
        for (std::size_t j = 0; j < grad.size(); ++j) dst[j] = static_cast<T>(grad[j]);
      }
      if (i + 1 == walks.offsets[w + 1]) break;
      for (std::int64_t h = 0; h < d.heads; ++h) {
        const T* fp = transitions + (g * d.heads + h) * d.dk * width;
        const T* gs = state_grads + (g * d.heads + h) * per_head;
        const double* dd = grad.data() + h * per_head;
        double* p = prev.data() + h * per_head;
        for (std::int64_t j = 0; j < per_head; ++j) p[j] = gs[j];
        for (std::int64_t a = 0; a < d.dk; ++a) {
          const T* row = fp + a * width;
          for (std::int64_t b = 0; b < d.dk; ++b) {
            const double pab = row[d.dv + b];
            for (std::int64_t col = 0; col < d.dv; ++col)
              p[b * d.dv + col] += pab * dd[a * d.dv + col];
          }
        }
      }
      grad.swap(prev);
    }
  }
}

template <typename T>
void state_grads_of(const T* query_maps, const T* dout, const std::int32_t* cu,
                    std::int64_t segments, const StateDims& d, T* grads) {
  std::vector<double> sum(static_cast<std::size_t>(d.dk * d.dv));
  for (std::int64_t s = 0; s < segments; ++s) {
    for (std::int64_t h = 0; h < d.heads; ++h) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const T* w = query_maps + (t * d.heads + h) * d.dk;
        const T* o = dout + (t * d.heads + h) * d.dv;
        for (std::int64_t b = 0; b < d.dk; ++b) {
          const double wb = w[b];
          for (std::int64_t col = 0; col < d.dv; ++col)
            sum[static_cast<std::size_t>(b * d.dv + col)] += wb * o[col];
        }
      }
      T* out = grads + (s * d.heads + h) * d.dk * d.dv;
      for (std::size_t j = 0; j < sum.size(); ++j) out[j] = static_cast<T>(sum[j]);
    }
  }
}

}  // namespace

void compose_segment_prefixes(const OpContext& ctx, const Tensor& transitions,
                              const Tensor& walk_segments, const Tensor& walk_offsets,
                              std::int64_t first_own, std::int64_t end_own,
                              const Tensor& initial_states) {
  constexpr std::string_view op = "compose_segment_prefixes";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"transitions", &transitions}, {"initial_states", &initial_states}});
  const StateDims d = check_states(op, transitions, initial_states, first_own, end_own);
  const Walks walks = check_walks(op, walk_segments, walk_offsets, transitions.size(0));
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).compose_segment_prefixes(
        ctx, transitions, walk_segments, walk_offsets, first_own, end_own, initial_states);
  detail::dispatch_float(op, transitions.dtype(), [&](auto zero) {
    using T = decltype(zero);
    compose_prefixes(transitions.data<T>(), walks, first_own, end_own, d, initial_states.data<T>());
  });
}

void compose_segment_suffixes(const OpContext& ctx, const Tensor& transitions,
                              const Tensor& state_grads, const Tensor& walk_segments,
                              const Tensor& walk_offsets, std::int64_t first_own,
                              std::int64_t end_own, const Tensor& final_grads) {
  constexpr std::string_view op = "compose_segment_suffixes";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"transitions", &transitions},
                                                {"state_grads", &state_grads},
                                                {"final_grads", &final_grads}});
  const StateDims d = check_states(op, transitions, final_grads, first_own, end_own);
  detail::require_shape(op, "state_grads", state_grads,
                        Shape{transitions.size(0), d.heads, d.dk, d.dv});
  const Walks walks = check_walks(op, walk_segments, walk_offsets, transitions.size(0));
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).compose_segment_suffixes(ctx, transitions, state_grads,
                                                           walk_segments, walk_offsets, first_own,
                                                           end_own, final_grads);
  detail::dispatch_float(op, transitions.dtype(), [&](auto zero) {
    using T = decltype(zero);
    compose_suffixes(transitions.data<T>(), state_grads.data<T>(), walks, first_own, end_own, d,
                     final_grads.data<T>());
  });
}

void segment_state_grads(const OpContext& ctx, const Tensor& query_maps, const Tensor& dout,
                         const Tensor& cu_seqlens, const Tensor& grads) {
  constexpr std::string_view op = "segment_state_grads";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"query_maps", &query_maps}, {"dout", &dout}, {"grads", &grads}});
  detail::require_rank(op, "grads", grads, 4);
  const StateDims d{grads.size(1), grads.size(2), grads.size(3)};
  detail::require_rank(op, "dout", dout, 3);
  detail::require_shape(op, "query_maps", query_maps, Shape{dout.size(0), d.heads, d.dk});
  detail::require_shape(op, "dout", dout, Shape{dout.size(0), d.heads, d.dv});
  detail::require_dtype(op, "cu_seqlens", cu_seqlens, DType::i32);
  if (cu_seqlens.device() != Device::cpu) detail::fail(op, "cu_seqlens must be on the host");
  if (cu_seqlens.numel() != grads.size(0) + 1)
    detail::fail(op,
                 "cu_seqlens " + cu_seqlens.describe() + " must hold one entry per segment + 1");
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).segment_state_grads(ctx, query_maps, dout, cu_seqlens, grads);
  detail::dispatch_float(op, dout.dtype(), [&](auto zero) {
    using T = decltype(zero);
    state_grads_of(query_maps.data<T>(), dout.data<T>(), cu_seqlens.data<std::int32_t>(),
                   grads.size(0), d, grads.data<T>());
  });
}

void copy_columns(const OpContext& ctx, const Tensor& src, std::int64_t src_col, const Tensor& dst,
                  std::int64_t dst_col, std::int64_t width) {
  constexpr std::string_view op = "copy_columns";
  detail::require_rank(op, "src", src, 2);
  detail::require_rank(op, "dst", dst, 2);
  detail::require_device(op, ctx, "src", src);
  detail::require_device(op, ctx, "dst", dst);
  if (src.dtype() != dst.dtype() || src.size(0) != dst.size(0) || src_col < 0 || dst_col < 0 ||
      width < 0 || src_col + width > src.size(1) || dst_col + width > dst.size(1))
    detail::fail(op, "columns [" + std::to_string(src_col) + ", +" + std::to_string(width) +
                         ") of " + src.describe() + " do not fit [" + std::to_string(dst_col) +
                         ", +" + std::to_string(width) + ") of " + dst.describe());
  if (src.size(0) == 0 || width == 0) return;
  if (ctx.device == Device::cuda) {
    if (src.dtype() != DType::f32) detail::fail(op, "f32 only on cuda, got " + src.describe());
    return detail::device_ops(op).copy_columns(ctx, src, src_col, dst, dst_col, width);
  }
  const std::size_t element = core::dtype_size(src.dtype());
  const auto* from = static_cast<const std::byte*>(src.raw_data());
  auto* to = static_cast<std::byte*>(dst.raw_data());
  for (std::int64_t r = 0; r < src.size(0); ++r) {
    std::memcpy(to + static_cast<std::size_t>(r * dst.size(1) + dst_col) * element,
                from + static_cast<std::size_t>(r * src.size(1) + src_col) * element,
                static_cast<std::size_t>(width) * element);
  }
}

void set_identity_columns(const OpContext& ctx, const Tensor& t, std::int64_t col) {
  constexpr std::string_view op = "set_identity_columns";
  detail::require_float_operands_on_any_device(op, ctx, {{"t", &t}});
  detail::require_rank(op, "t", t, 3);
  const std::int64_t dk = t.size(1), width = t.size(2);
  if (col < 0 || col + dk > width)
    detail::fail(op, "an identity of " + std::to_string(dk) + " columns from column " +
                         std::to_string(col) + " does not fit " + t.describe());
  if (ctx.device == Device::cuda) return detail::device_ops(op).set_identity_columns(ctx, t, col);
  detail::dispatch_float(op, t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = t.data<T>();
    for (std::int64_t i = 0; i < t.size(0); ++i) {
      for (std::int64_t a = 0; a < dk; ++a) data[(i * dk + a) * width + col + a] = T(1);
    }
  });
}

}  // namespace dyncp::ops
