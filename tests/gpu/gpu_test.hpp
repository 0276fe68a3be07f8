#pragma once
// A small harness for the GPU tests: each test compares a CUDA kernel against the CPU op from
// lib/ops on random inputs. No Catch2 (the GPU test build carries as few host libraries as it
// can, docs/cuda.md); main() returns 77 (ctest's SKIP_RETURN_CODE) when no GPU is visible.

#include <cuda_bf16.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "device_buffer.hpp"

namespace dyncp::gpu_test {

using core::DType;
using core::Shape;
using core::Tensor;
using kernels::DeviceBuffer;

// Registration: GPU_TEST(name) { ... } defines a test run by main().
void register_test(const char* name, std::function<void()> body);
struct Registrar {
  Registrar(const char* name, std::function<void()> body) { register_test(name, std::move(body)); }
};
#define GPU_TEST(name)                                                \
  static void name();                                                 \
  static ::dyncp::gpu_test::Registrar name##_registrar(#name, &name); \
  static void name()

// Records a failed check (the test goes on, so one run reports every mismatch).
void fail(const std::string& what);
void expect(bool condition, const std::string& what);

// Elementwise |got − want| <= atol + rtol·|want|, with atol = atol_rel · max|want| (so the
// bound scales with the data). Prints the worst element either way.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double atol_rel, double rtol);

// Tolerances (docs/cuda.md): fp32 kernels vs fp32 CPU ops differ only in rounding order and
// libm; bf16-input kernels get the same bf16-rounded inputs as the CPU op, so the remaining
// difference is fp32 accumulation order plus any bf16 rounding inside the kernel.
constexpr double kF32AtolRel = 1e-5, kF32Rtol = 1e-4;
constexpr double kGemmAtolRel = 1e-4, kGemmRtol = 1e-3;
constexpr double kBf16AtolRel = 1e-2, kBf16Rtol = 2e-2;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float low = -1.0f,
                                 float high = 1.0f);
// Rounds every value to the nearest bf16 (so CPU and GPU see the same inputs).
std::vector<float> round_to_bf16(std::vector<float> values);
DeviceBuffer<__nv_bfloat16> to_device_bf16(const std::vector<float>& values);
// An f32 tensor's values on the host, wherever the tensor lives.
std::vector<float> to_host(const Tensor& t);

// CPU views of host vectors for the lib/ops calls.
template <typename T>
Tensor view(std::vector<T>& data, const Shape& shape) {
  DType dtype = DType::f32;
  if constexpr (std::is_same_v<T, std::int32_t>) dtype = DType::i32;
  if constexpr (std::is_same_v<T, std::int64_t>) dtype = DType::i64;
  if constexpr (std::is_same_v<T, std::uint8_t>) dtype = DType::u8;
  if constexpr (std::is_same_v<T, double>) dtype = DType::f64;
  return Tensor::view_of(data.data(), shape, dtype);
}

}  // namespace dyncp::gpu_test
