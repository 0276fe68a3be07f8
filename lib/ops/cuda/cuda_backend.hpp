#pragma once
// The CUDA backend of the ops (ops/device_ops.hpp) and of device memory
// (core/device_memory.hpp): kernels/ behind the ops' entry points. The same sources build
// twice, against the real CUDA toolkit (dyncp_ops_cuda) and against the emulated backend
// (dyncp_ops_cuda_emulated, kernels/emulation/), so everything above runs unchanged on both.

#include <string>

namespace dyncp::ops::cuda {

// Installs the backend for this process (idempotent). Throws when no device is visible.
void install_backend();
// The same, but false instead of an error when no device is visible (dist.device: auto).
bool install_backend_if_visible();
// "CUDA" or "emulated CUDA".
std::string backend_name();
// Number of visible devices (0 without a driver or GPU).
int visible_devices();
// One device per rank: selects device `local_rank`, or throws naming the rank when the node has
// too few.
int select_device(int local_rank, int rank);

}  // namespace dyncp::ops::cuda
