#include "parallel/segment_states.hpp"

#include <algorithm>
#include <vector>

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {

// Incoming states of this rank's segments: S_in of a chain's first segment is zero and
// S_in(next) = P S_in + F, with transitions[g, h] = [F | P] ([dk, dv + dk]).
template <typename T>
void compose_prefixes_impl(const T* transitions,
                           const std::vector<std::vector<std::int64_t>>& chains,
                           std::int64_t first_own, std::int64_t end_own, std::int64_t heads,
                           std::int64_t dk, std::int64_t dv, T* initial) {
  const std::int64_t width = dv + dk, per_head = dk * dv;
  std::vector<double> state(static_cast<std::size_t>(heads * per_head));
  std::vector<double> next(state.size());
  for (const std::vector<std::int64_t>& chain : chains) {
    std::int64_t last = -1;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (chain[i] >= first_own && chain[i] < end_own) last = static_cast<std::int64_t>(i);
    }
    std::fill(state.begin(), state.end(), 0.0);
    for (std::int64_t i = 0; i <= last; ++i) {
      const std::int64_t g = chain[static_cast<std::size_t>(i)];
      if (g >= first_own && g < end_own) {
        T* dst = initial + (g - first_own) * heads * per_head;
        for (std::size_t j = 0; j < state.size(); ++j) dst[j] = static_cast<T>(state[j]);
      }
      if (i == last) break;
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* fp = transitions + (g * heads + h) * dk * width;
        const double* s = state.data() + h * per_head;
        double* n = next.data() + h * per_head;
        for (std::int64_t a = 0; a < dk; ++a) {
          const T* row = fp + a * width;
          for (std::int64_t col = 0; col < dv; ++col) n[a * dv + col] = row[col];
          for (std::int64_t b = 0; b < dk; ++b) {
            const double p = row[dv + b];
            for (std::int64_t col = 0; col < dv; ++col) n[a * dv + col] += p * s[b * dv + col];
          }
        }
      }
      state.swap(next);
    }
  }
}

// Final-state gradients of this rank's segments: zero for a chain's last segment, and
// dS_out(prev) = dS_in(next) = G(next) + Pᵀ(next) dS_out(next).
template <typename T>
void compose_suffixes_impl(const T* transitions, const T* state_grads,
                           const std::vector<std::vector<std::int64_t>>& chains,
                           std::int64_t first_own, std::int64_t end_own, std::int64_t heads,
                           std::int64_t dk, std::int64_t dv, T* final_grads) {
  const std::int64_t width = dv + dk, per_head = dk * dv;
  std::vector<double> grad(static_cast<std::size_t>(heads * per_head));
  std::vector<double> prev(grad.size());
  for (const std::vector<std::int64_t>& chain : chains) {
    auto first = static_cast<std::int64_t>(chain.size());
    for (std::size_t i = chain.size(); i-- > 0;) {
      if (chain[i] >= first_own && chain[i] < end_own) first = static_cast<std::int64_t>(i);
    }
    std::fill(grad.begin(), grad.end(), 0.0);
    for (auto i = static_cast<std::int64_t>(chain.size()) - 1; i >= first; --i) {
      const std::int64_t g = chain[static_cast<std::size_t>(i)];
      if (g >= first_own && g < end_own) {
        T* dst = final_grads + (g - first_own) * heads * per_head;
        for (std::size_t j = 0; j < grad.size(); ++j) dst[j] = static_cast<T>(grad[j]);
      }
      if (i == first) break;
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* fp = transitions + (g * heads + h) * dk * width;
        const T* gs = state_grads + (g * heads + h) * per_head;
        const double* d = grad.data() + h * per_head;
        double* p = prev.data() + h * per_head;
        for (std::int64_t j = 0; j < per_head; ++j) p[j] = gs[j];
        for (std::int64_t a = 0; a < dk; ++a) {
          const T* row = fp + a * width;
          for (std::int64_t b = 0; b < dk; ++b) {
            const double pab = row[dv + b];
            for (std::int64_t col = 0; col < dv; ++col) p[b * dv + col] += pab * d[a * dv + col];
          }
        }
      }
      grad.swap(prev);
    }
  }
}

// G = dL/dS_in of each own segment through its own outputs: Σ_t w_t dout_tᵀ per head, with
// w the query maps [T, Hv, dk] and dout [T, Hv, dv].
template <typename T>
void own_state_grads_impl(const T* query_maps, const T* dout, const Tensor& cu_seqlens,
                          std::int64_t heads, std::int64_t dk, std::int64_t dv, T* grads) {
  const std::int32_t* cu = cu_seqlens.data<std::int32_t>();
  std::vector<double> sum(static_cast<std::size_t>(dk * dv));
  for (std::int64_t s = 0; s + 1 < cu_seqlens.numel(); ++s) {
    for (std::int64_t h = 0; h < heads; ++h) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const T* w = query_maps + (t * heads + h) * dk;
        const T* d = dout + (t * heads + h) * dv;
        for (std::int64_t b = 0; b < dk; ++b) {
          const double wb = w[b];
          for (std::int64_t col = 0; col < dv; ++col)
            sum[static_cast<std::size_t>(b * dv + col)] += wb * d[col];
        }
      }
      T* out = grads + (s * heads + h) * dk * dv;
      for (std::size_t j = 0; j < sum.size(); ++j) out[j] = static_cast<T>(sum[j]);
    }
  }
}

}  // namespace

void compose_incoming_states(const Tensor& transitions, const SegmentChains& chains,
                             std::int64_t first_own, std::int64_t end_own,
                             const Tensor& initial_states) {
  const std::int64_t heads = initial_states.size(1), dk = initial_states.size(2),
                     dv = initial_states.size(3);
  if (transitions.dtype() == DType::f64) {
    compose_prefixes_impl(transitions.data<double>(), chains, first_own, end_own, heads, dk, dv,
                          initial_states.data<double>());
  } else {
    compose_prefixes_impl(transitions.data<float>(), chains, first_own, end_own, heads, dk, dv,
                          initial_states.data<float>());
  }
}

void compose_final_state_grads(const Tensor& transitions, const Tensor& state_grads,
                               const SegmentChains& chains, std::int64_t first_own,
                               std::int64_t end_own, const Tensor& final_grads) {
  const std::int64_t heads = final_grads.size(1), dk = final_grads.size(2),
                     dv = final_grads.size(3);
  if (transitions.dtype() == DType::f64) {
    compose_suffixes_impl(transitions.data<double>(), state_grads.data<double>(), chains, first_own,
                          end_own, heads, dk, dv, final_grads.data<double>());
  } else {
    compose_suffixes_impl(transitions.data<float>(), state_grads.data<float>(), chains, first_own,
                          end_own, heads, dk, dv, final_grads.data<float>());
  }
}

void own_state_grads(const Tensor& query_maps, const Tensor& dout, const Tensor& cu_seqlens,
                     const Tensor& grads) {
  const std::int64_t heads = grads.size(1), dk = grads.size(2), dv = grads.size(3);
  if (dout.dtype() == DType::f64) {
    own_state_grads_impl(query_maps.data<double>(), dout.data<double>(), cu_seqlens, heads, dk, dv,
                         grads.data<double>());
  } else {
    own_state_grads_impl(query_maps.data<float>(), dout.data<float>(), cu_seqlens, heads, dk, dv,
                         grads.data<float>());
  }
}

}  // namespace dyncp::parallel
