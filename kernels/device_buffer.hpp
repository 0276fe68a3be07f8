#pragma once
// Owning device allocation (cudaMalloc / cudaFree), move-only. For tests, scratch and
// per-step buffers; training code takes views of larger arenas instead.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda_check.hpp"

namespace dyncp::kernels {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    // One extra byte so a zero-element buffer still has a distinct, valid pointer.
    DYNCP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T) + 1));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) {
      core::throw_runtime_error("DeviceBuffer::upload: " + std::to_string(host.size()) +
                                " elements into a buffer of " + std::to_string(count_));
    }
    DYNCP_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    DYNCP_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  void zero() { DYNCP_CUDA_CHECK(cudaMemset(data_, 0, bytes())); }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
    data_ = nullptr;
  }

  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace dyncp::kernels
