#pragma once
// The backend's core::DeviceMemory (internal to lib/ops/cuda/).
#include "core/device_memory.hpp"

namespace dyncp::ops::cuda {
core::DeviceMemory& cuda_device_memory();
}
