// core::DeviceMemory over the CUDA runtime: plain cudaMalloc blocks (never managed memory).
#include "ops/cuda/cuda_device_memory.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "cuda_check.hpp"
#include "ops/cuda/cuda_backend.hpp"

namespace dyncp::ops::cuda {
namespace {

cudaMemcpyKind kind_of(core::Device dst, core::Device src) {
  if (dst == core::Device::cuda) {
    return src == core::Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  }
  return src == core::Device::cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

class CudaDeviceMemory final : public core::DeviceMemory {
 public:
  void* allocate(std::size_t bytes) override {
    void* pointer = nullptr;
    const cudaError_t status = cudaMalloc(&pointer, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      core::throw_runtime_error("out of GPU memory allocating " + std::to_string(bytes >> 20) +
                                " MiB (" + std::to_string(free_bytes >> 20) + " of " +
                                std::to_string(total_bytes >> 20) +
                                " MiB free): " + cudaGetErrorString(status));
    }
    return pointer;
  }
  void release(void* pointer) noexcept override { cudaFree(pointer); }
  void copy(void* dst, core::Device dst_device, const void* src, core::Device src_device,
            std::size_t bytes) override {
    DYNCP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind_of(dst_device, src_device)));
  }
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t rows) override {
    DYNCP_CUDA_CHECK(
        cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice));
  }
  void set_zero(void* dst, std::size_t bytes) override {
    DYNCP_CUDA_CHECK(cudaMemset(dst, 0, bytes));
  }
  bool is_device_pointer(const void* pointer) const override {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      cudaGetLastError();  // an unregistered host pointer is an error on older runtimes
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice;
  }
  std::string name() const override { return backend_name(); }
  int visible_devices() const override { return cuda::visible_devices(); }
  void select_device(int local_rank, int rank) override { cuda::select_device(local_rank, rank); }
};

}  // namespace

core::DeviceMemory& cuda_device_memory() {
  static CudaDeviceMemory memory;
  return memory;
}

}  // namespace dyncp::ops::cuda
