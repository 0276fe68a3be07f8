#pragma once
// What every op receives first: the device it runs on and where its temporary memory comes from.
//
// Conventions shared by all ops in this folder (docs/ops.md):
// - The caller supplies every output, saved tensor and gradient, usually as Arena views; ops
//   never allocate heap memory. Ops that need temporary scratch take it from `scratch` and give
//   it back (ArenaScope) before returning; such ops say so and throw if `scratch` is null.
// - The entry point checks shapes, dtypes and devices and throws a core::Error naming the op and
//   the shapes; then it dispatches once on the device (CPU code in lib/ops/*_cpu.cpp).
// - Float ops accept f32 (training) and f64 (finite-difference tests); all float operands of one
//   call share the same dtype. Index tensors are i32 unless stated otherwise.
// - Gradients: parameter gradients ACCUMULATE (+=) so micro-batches add up; input gradients
//   OVERWRITE (=) unless the op takes a GradMode for that argument (the residual-stream joins).
//   Each header says which applies to every gradient argument.

#include "core/arena.hpp"
#include "core/tensor.hpp"

namespace dyncp::ops {

using core::Device;
using core::DType;
using core::Shape;
using core::Tensor;

// What the matrix products and attention compute on (mixed_precision, docs/precision.md).
// fp32: every operand as it is. bf16: the products (gemm, linear, grouped linear, the LM head
// of fused_cross_entropy) and attention read their operands rounded to bf16 (weights and
// activations alike) and accumulate in fp32 into fp32 outputs; weight gradients accumulate in
// fp32 into the fp32 gradient (Megatron's main_grad). Element- and row-wise ops stay fp32. The
// CPU computes the bf16 products in fp32 on bf16-rounded copies of the operands (taken from
// ctx.scratch); CUDA runs the bf16 kernels (cuBLASLt bf16, the bf16 attention kernel).
enum class ComputePrecision { fp32, bf16 };

struct OpContext {
  Device device = Device::cpu;
  core::Arena* scratch = nullptr;  // temporary memory for ops that need it
  void* stream = nullptr;          // cudaStream_t on CUDA; unused on CPU
  ComputePrecision precision = ComputePrecision::fp32;
};

// How an op writes an input gradient.
enum class GradMode { overwrite, accumulate };

}  // namespace dyncp::ops
