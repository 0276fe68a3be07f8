#include "ops/bf16_operands.hpp"

#include <string>

#include "ops/op_checks.hpp"

namespace dyncp::ops::detail {

bool bf16_products(std::string_view op, const OpContext& ctx, const Tensor& operand) {
  if (ctx.precision != ComputePrecision::bf16) return false;
  if (operand.dtype() != DType::f32 && operand.dtype() != DType::bf16) {
    fail(op, "bf16 products round fp32 operands; got " + operand.describe() +
                 " (use an fp32 context for f64 operands)");
  }
  return true;
}

OpContext with_fp32_products(const OpContext& ctx) {
  OpContext fp32 = ctx;
  fp32.precision = ComputePrecision::fp32;
  return fp32;
}

void round_to_bf16(float* values, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    values[i] = core::bf16_bits_to_float(core::float_to_bf16_bits(values[i]));
}

Tensor bf16_rounded_copy(core::Arena& scratch, const Tensor& x) {
  if (!x.defined()) return x;
  const Tensor copy = scratch.allocate(x.shape(), DType::f32);
  if (x.dtype() == DType::bf16) {  // bf16 storage: widened, already rounded
    float* out = copy.data<float>();
    const std::uint16_t* bits = x.bf16_bits();
    for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = core::bf16_bits_to_float(bits[i]);
    return copy;
  }
  copy.copy_from(x);
  round_to_bf16(copy.data<float>(), copy.numel());
  return copy;
}

}  // namespace dyncp::ops::detail
