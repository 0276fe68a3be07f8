#pragma once
// What the CUDA runtime can see. Safe to call on machines without a GPU or driver.

namespace dyncp::kernels {

// Number of visible CUDA devices; 0 when there is no driver or no device.
int visible_device_count();

}  // namespace dyncp::kernels
