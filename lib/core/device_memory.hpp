#pragma once
// Memory on Device::cuda, for the layers that must not know CUDA (Tensor, Arena, the step
// engine): a CUDA backend (lib/ops/cuda/) installs its allocator and copies here at start-up,
// and every Tensor or Arena on the device goes through it. A binary without a backend refuses
// device tensors with an error that says so.
//
// Copies between host and device are counted, so the trainer can report the bytes that cross
// per step (docs/cuda.md).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace dyncp::core {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Throws core::Error (runtime) naming the size when the device is out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* pointer) noexcept = 0;
  // Synchronous: returns when dst holds the bytes (any pair of devices).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) = 0;
  // Synchronous device-to-device copy of `rows` rows of `width` bytes, rows `src_pitch` bytes
  // apart in src and `dst_pitch` apart in dst (a column block of a row-major tensor).
  virtual void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t width, std::size_t rows) = 0;
  virtual void set_zero(void* dst, std::size_t bytes) = 0;
  // True when `pointer` is device memory of this backend (communicators route on it).
  virtual bool is_device_pointer(const void* pointer) const = 0;
  // "CUDA" or "emulated CUDA", for logs.
  virtual std::string name() const = 0;
  virtual int visible_devices() const = 0;
  // One device per rank: selects device `local_rank`, or throws naming `rank` when the node has
  // too few.
  virtual void select_device(int local_rank, int rank) = 0;
};

// The backend's object lives for the whole process; installing twice replaces it.
void install_device_memory(DeviceMemory* memory);
bool has_device_memory();
// Throws when no backend is installed.
DeviceMemory& device_memory();
// False without a backend.
bool is_device_pointer(const void* pointer);

struct DeviceTraffic {
  std::atomic<std::uint64_t> host_to_device_bytes{0};
  std::atomic<std::uint64_t> device_to_host_bytes{0};
};
DeviceTraffic& device_traffic();

}  // namespace dyncp::core
