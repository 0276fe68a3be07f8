#include <algorithm>
#include <cmath>
#include <string>

#include "ops/causal_conv1d.hpp"
#include "ops/cu_seqlens_check.hpp"
#include "ops/device_ops.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

template <typename T>
T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

// Returns (channels, kernel size).
std::pair<std::int64_t, std::int64_t> check(std::string_view op, const Tensor& x,
                                            const Tensor& weight, const Tensor& cu_seqlens) {
  detail::require_rank(op, "x", x, 2);
  detail::require_rank(op, "weight", weight, 2);
  if (weight.size(0) != x.size(1) || weight.size(1) < 1) {
    detail::fail(op, "weight " + weight.describe() + " must be [C, K >= 1] for x " + x.describe() +
                         " (HF conv1d.weight [C, 1, K] reshaped to [C, K])");
  }
  detail::check_cu_seqlens(op, "cu_seqlens", cu_seqlens, x.size(0));
  return {x.size(1), weight.size(1)};
}

// pre_t[c] for tokens [begin, end) of one sequence, written into pre (row t − begin).
template <typename T>
void pre_activation(const T* x, const T* w, std::int64_t channels, std::int64_t kernel,
                    std::int64_t begin, std::int64_t end, std::int64_t t, T* pre_row) {
  std::fill(pre_row, pre_row + channels, T(0));
  for (std::int64_t j = 0; j < kernel; ++j) {
    const std::int64_t source = t - (kernel - 1) + j;
    if (source < begin || source >= end) continue;
    const T* xr = x + source * channels;
    for (std::int64_t c = 0; c < channels; ++c) pre_row[c] += w[c * kernel + j] * xr[c];
  }
}

}  // namespace

void causal_conv1d_silu_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                                const Tensor& cu_seqlens, const Tensor& y) {
  constexpr std::string_view op = "causal_conv1d_silu_forward";
  detail::require_float_operands_on_any_device(op, ctx,
                                               {{"x", &x}, {"weight", &weight}, {"y", &y}});
  const auto [channels, kernel] = check(op, x, weight, cu_seqlens);
  detail::require_shape(op, "y", y, x.shape());
  if (y.raw_data() == x.raw_data() && x.numel() > 0) detail::fail(op, "y must not alias x");
  const std::int32_t* cu = cu_seqlens.data<std::int32_t>();
  const std::int64_t sequences = cu_seqlens.size(0) - 1;
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).causal_conv1d_silu_forward(ctx, x, weight, cu_seqlens, y);
  detail::dispatch_float(op, x.dtype(), [&, channels = channels, kernel = kernel](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* w = weight.data<T>();
    T* ys = y.data<T>();
    for (std::int64_t s = 0; s < sequences; ++s) {
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        T* yr = ys + t * channels;
        pre_activation(xs, w, channels, kernel, cu[s], cu[s + 1], t, yr);
        for (std::int64_t c = 0; c < channels; ++c) yr[c] = yr[c] * sigmoid(yr[c]);
      }
    }
  });
}

void causal_conv1d_silu_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                 const Tensor& weight, const Tensor& cu_seqlens, const Tensor& dx,
                                 const Tensor& dweight) {
  constexpr std::string_view op = "causal_conv1d_silu_backward";
  detail::require_float_operands_on_any_device(
      op, ctx, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"dx", &dx}, {"dweight", &dweight}});
  const auto [channels, kernel] = check(op, x, weight, cu_seqlens);
  detail::require_shape(op, "dy", dy, x.shape());
  if (dx.defined()) {
    detail::require_shape(op, "dx", dx, x.shape());
    if (dx.raw_data() == dy.raw_data() && x.numel() > 0) detail::fail(op, "dx must not alias dy");
  }
  if (dweight.defined()) detail::require_shape(op, "dweight", dweight, weight.shape());
  const std::int32_t* cu = cu_seqlens.data<std::int32_t>();
  const std::int64_t sequences = cu_seqlens.size(0) - 1;
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).causal_conv1d_silu_backward(ctx, dy, x, weight, cu_seqlens, dx,
                                                              dweight);
  detail::dispatch_float(op, x.dtype(), [&, channels = channels, kernel = kernel](auto zero) {
    using T = decltype(zero);
    const T* xs = x.data<T>();
    const T* dys = dy.data<T>();
    const T* w = weight.data<T>();
    T* dxs = dx.defined() ? dx.data<T>() : nullptr;
    T* dw = dweight.defined() ? dweight.data<T>() : nullptr;
    if (dxs != nullptr) std::fill(dxs, dxs + x.numel(), T(0));
    // One row of dpre at a time; it is scattered into dx (the K rows it reads) and dw. The
    // row lives on the stack in blocks of channels so no scratch is needed.
    constexpr std::int64_t kBlock = 256;
    T dpre[kBlock];
    for (std::int64_t s = 0; s < sequences; ++s) {
      const std::int64_t begin = cu[s], end = cu[s + 1];
      for (std::int64_t t = begin; t < end; ++t) {
        for (std::int64_t c0 = 0; c0 < channels; c0 += kBlock) {
          const std::int64_t width = std::min(kBlock, channels - c0);
          for (std::int64_t c = 0; c < width; ++c) {
            T pre = 0;
            for (std::int64_t j = 0; j < kernel; ++j) {
              const std::int64_t source = t - (kernel - 1) + j;
              if (source >= begin) pre += w[(c0 + c) * kernel + j] * xs[source * channels + c0 + c];
            }
            const T sg = sigmoid(pre);
            dpre[c] = dys[t * channels + c0 + c] * sg * (T(1) + pre * (T(1) - sg));
          }
          for (std::int64_t j = 0; j < kernel; ++j) {
            const std::int64_t source = t - (kernel - 1) + j;
            if (source < begin) continue;
            for (std::int64_t c = 0; c < width; ++c) {
              const std::int64_t ch = c0 + c;
              if (dxs != nullptr) dxs[source * channels + ch] += dpre[c] * w[ch * kernel + j];
              if (dw != nullptr) dw[ch * kernel + j] += dpre[c] * xs[source * channels + ch];
            }
          }
        }
      }
    }
  });
}

}  // namespace dyncp::ops
