#pragma once
// Device memory of the emulated CUDA backend: one reserved address range, inaccessible
// (PROT_NONE) except while the runtime stand-in copies or sets memory and while an emulated
// kernel runs. Host code that dereferences a device pointer therefore faults, and the fault
// handler names the allocation, as a missing copy or a host loop over device data would fail
// on a GPU. Allocations are 256-byte aligned, like cudaMalloc's.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace dyncp::emulation {

class DeviceHeap {
 public:
  static DeviceHeap& instance();

  // nullptr when the emulated device's memory (DYNCP_EMULATED_GPU_MEMORY_MIB, default 16 GiB)
  // is exhausted.
  void* allocate(std::size_t bytes);
  // false when `pointer` is not the start of a live allocation.
  bool release(void* pointer);
  bool in_range(const void* pointer) const;
  // True when [pointer, pointer + bytes) lies inside one live allocation.
  bool covers(const void* pointer, std::size_t bytes) const;
  // Base and requested size of the live allocation holding `pointer` (false when none).
  bool find(const void* pointer, std::uintptr_t& base, std::size_t& size) const;

  std::size_t total_bytes() const { return capacity_; }
  std::size_t used_bytes() const;

  // Nested: the first open makes the used range readable and writable, the last close makes
  // it inaccessible again.
  void open();
  void close();
  bool is_open() const { return open_depth_ > 0; }

 private:
  DeviceHeap();
  void protect(int protection);

  std::byte* base_ = nullptr;
  std::size_t reserved_ = 0;
  std::size_t capacity_ = 0;
  std::size_t top_ = 0;        // bytes of the range ever handed out
  std::size_t protected_ = 0;  // bytes whose protection open/close toggles
  struct Allocation {
    std::size_t reserved;   // rounded to the alignment
    std::size_t requested;  // what cudaMalloc was asked for: copies must stay inside it
  };
  std::map<std::size_t, Allocation> live_;   // offset -> allocation
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, coalesced
  int open_depth_ = 0;
  mutable std::mutex mutex_;
};

// Opens device memory to the host for a scope: only the runtime stand-in and kernel launches
// use this.
class DeviceAccess {
 public:
  DeviceAccess() { DeviceHeap::instance().open(); }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
  ~DeviceAccess() { DeviceHeap::instance().close(); }
};

}  // namespace dyncp::emulation
