#pragma once
// Turning the ops' tensors into kernel arguments (internal to lib/ops/cuda): the stream, raw
// pointers (null for an undefined tensor), the scratch arena, bf16 operand copies, and the small
// device values the kernels report through (a bad index, a sum), each read back with one
// synchronous copy that is counted as host / device traffic.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/arena.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "cuda_check.hpp"
#include "ops.hpp"
#include "ops/context.hpp"

namespace dyncp::ops::cuda {

inline cudaStream_t stream_of(const OpContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

inline float* f32(const Tensor& t) {
  return t.defined() ? t.data<float>() : nullptr;
}

inline std::int32_t* i32(const Tensor& t) {
  return t.defined() ? t.data<std::int32_t>() : nullptr;
}

inline core::Arena& scratch_of(const OpContext& ctx, const char* op) {
  if (ctx.scratch == nullptr || ctx.scratch->device() != Device::cuda) {
    core::throw_runtime_error(std::string(op) + ": needs a cuda scratch arena in ctx.scratch");
  }
  return *ctx.scratch;
}

// bf16 products (OpContext::precision): the fp32 operands are converted to bf16 copies in
// scratch (weights each call: the fp32 parameters are the master weights) and the bf16 kernels
// accumulate in fp32 into fp32 outputs.
inline bool bf16_products(const OpContext& ctx) {
  return ctx.precision == ComputePrecision::bf16;
}

inline const kernels::bf16* to_bf16(core::Arena& scratch, const Tensor& t, cudaStream_t stream) {
  using kernels::bf16;
  // bf16 storage (bf16 activations) is already the rounded operand.
  if (t.dtype() == core::DType::bf16) return static_cast<const bf16*>(t.raw_data());
  if (!t.defined()) return nullptr;
  const Tensor copy = scratch.allocate(t.shape(), core::DType::bf16);
  kernels::convert_f32_to_bf16(f32(t), static_cast<bf16*>(copy.raw_data()), t.numel(), stream);
  return static_cast<const bf16*>(copy.raw_data());
}

template <typename T>
T* device_scalar(core::Arena& scratch, T initial) {
  const Tensor t =
      scratch.allocate({static_cast<std::int64_t>((sizeof(T) + 3) / 4)}, core::DType::i32);
  DYNCP_CUDA_CHECK(cudaMemcpy(t.raw_data(), &initial, sizeof(T), cudaMemcpyHostToDevice));
  core::device_traffic().host_to_device_bytes += sizeof(T);
  return static_cast<T*>(t.raw_data());
}

template <typename T>
T read_back(const T* device) {
  T value;
  DYNCP_CUDA_CHECK(cudaMemcpy(&value, device, sizeof(T), cudaMemcpyDeviceToHost));
  core::device_traffic().device_to_host_bytes += sizeof(T);
  return value;
}

}  // namespace dyncp::ops::cuda
