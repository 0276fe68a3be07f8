#include <algorithm>
#include <string>

#include "ops/device_ops.hpp"
#include "ops/head_halves.hpp"
#include "ops/op_checks.hpp"

namespace dyncp::ops {
namespace {

// Returns (rows, half width) after checking packed [..., 2d] against first / second [..., d].
std::pair<std::int64_t, std::int64_t> check(std::string_view op, const OpContext& ctx,
                                            const Tensor& packed, const Tensor& first,
                                            const Tensor& second) {
  detail::require_float_operands_on_any_device(
      op, ctx, {{"packed", &packed}, {"first", &first}, {"second", &second}});
  detail::require_shape(op, "second", second, first.shape());
  Shape expected = first.shape();
  if (expected.rank() < 2) detail::fail(op, "first must have rank >= 2, got " + first.describe());
  expected[expected.rank() - 1] *= 2;
  detail::require_shape(op, "packed", packed, expected);
  const std::int64_t half = first.shape().last();
  return {half == 0 ? 0 : first.numel() / half, half};
}

}  // namespace

void split_head_halves(const OpContext& ctx, const Tensor& packed, const Tensor& first,
                       const Tensor& second) {
  constexpr std::string_view op = "split_head_halves";
  const auto [rows, half] = check(op, ctx, packed, first, second);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).head_halves(ctx, packed, first, second, true);
  detail::dispatch_float(op, packed.dtype(), [&, rows = rows, half = half](auto zero) {
    using T = decltype(zero);
    const T* p = packed.data<T>();
    T* a = first.data<T>();
    T* b = second.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      std::copy(p + 2 * r * half, p + 2 * r * half + half, a + r * half);
      std::copy(p + 2 * r * half + half, p + 2 * (r + 1) * half, b + r * half);
    }
  });
}

void merge_head_halves(const OpContext& ctx, const Tensor& first, const Tensor& second,
                       const Tensor& packed) {
  constexpr std::string_view op = "merge_head_halves";
  const auto [rows, half] = check(op, ctx, packed, first, second);
  if (ctx.device == Device::cuda)
    return detail::device_ops(op).head_halves(ctx, packed, first, second, false);
  detail::dispatch_float(op, packed.dtype(), [&, rows = rows, half = half](auto zero) {
    using T = decltype(zero);
    T* p = packed.data<T>();
    const T* a = first.data<T>();
    const T* b = second.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      std::copy(a + r * half, a + (r + 1) * half, p + 2 * r * half);
      std::copy(b + r * half, b + (r + 1) * half, p + 2 * r * half + half);
    }
  });
}

}  // namespace dyncp::ops
