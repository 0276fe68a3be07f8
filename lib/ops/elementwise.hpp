#pragma once
// Small element-wise helpers the layers need around the ops (residual adds, scaling, dtype
// conversion). All operands: same shape (numel) and, unless stated, the same float dtype.

#include "ops/context.hpp"

namespace dyncp::ops {

// out = a + b (out may alias a or b)
void add(const OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
// y += alpha · x
void axpy(const OpContext& ctx, double alpha, const Tensor& x, const Tensor& y);
// x *= factor
void scale(const OpContext& ctx, const Tensor& x, double factor);
// x = 0 (any dtype)
void zero(const OpContext& ctx, const Tensor& x);
// dst = src (any dtype pair among f32, f64, bf16; bf16 rounds to nearest even). On a CUDA
// context f32 <-> bf16 only: what bf16 activation storage (docs/precision.md) needs.
void convert(const OpContext& ctx, const Tensor& src, const Tensor& dst);

}  // namespace dyncp::ops
