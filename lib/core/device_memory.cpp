#include "core/device_memory.hpp"

#include "core/error.hpp"

namespace dyncp::core {
namespace {

DeviceMemory* installed = nullptr;

}  // namespace

void install_device_memory(DeviceMemory* memory) {
  installed = memory;
}

bool has_device_memory() {
  return installed != nullptr;
}

DeviceMemory& device_memory() {
  if (installed == nullptr) {
    throw_runtime_error(
        "cuda tensors need a CUDA backend, and this binary has none (it was built without "
        "CUDA, or the backend was not installed): use dist.device: cpu");
  }
  return *installed;
}

bool is_device_pointer(const void* pointer) {
  return installed != nullptr && pointer != nullptr && installed->is_device_pointer(pointer);
}

DeviceTraffic& device_traffic() {
  static DeviceTraffic traffic;
  return traffic;
}

}  // namespace dyncp::core
