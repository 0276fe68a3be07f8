#pragma once
// The CPU side of ComputePrecision::bf16 (ops/context.hpp): the matrix products and attention
// read bf16-rounded copies of their operands and compute in fp32, which is what a bf16 tensor-core
// product with fp32 accumulation computes, up to the order of the fp32 additions.

#include <cstdint>
#include <string_view>

#include "ops/context.hpp"

namespace dyncp::ops::detail {

// True when `ctx` asks for bf16 products. bf16 products round fp32 values; f64 operands (the
// finite-difference tests) with a bf16 context are refused naming the op.
bool bf16_products(std::string_view op, const OpContext& ctx, const Tensor& operand);

// `ctx` with fp32 products: what a bf16 entry point calls itself with once its operands are
// rounded.
OpContext with_fp32_products(const OpContext& ctx);

// Each value rounded to the nearest bf16 (ties to even), in place.
void round_to_bf16(float* values, std::int64_t count);

// An f32 copy of the CPU tensor `x` with every value rounded to bf16 (a bf16 `x`, bf16 storage,
// widened), allocated from `scratch`
// (the caller holds an ArenaScope). An undefined `x` gives an undefined copy.
Tensor bf16_rounded_copy(core::Arena& scratch, const Tensor& x);

}  // namespace dyncp::ops::detail
