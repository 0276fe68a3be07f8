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

struct OpContext {
  Device device = Device::cpu;
  core::Arena* scratch = nullptr;  // temporary memory for ops that need it
  void* stream = nullptr;          // cudaStream_t on CUDA; unused on CPU
};

// How an op writes an input gradient.
enum class GradMode { overwrite, accumulate };

}  // namespace dyncp::ops
