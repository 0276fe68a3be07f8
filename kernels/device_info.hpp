#pragma once
// What the CUDA runtime can see. Safe to call on machines without a GPU or driver.

namespace dyncp::kernels {

// Number of visible CUDA devices; 0 when there is no driver or no device.
int visible_device_count();

// One GPU per rank: makes device `local_rank` current for this process and returns it. Throws
// a runtime core::Error naming the rank and the visible count when there are too few devices
// (each rank of a node needs its own; CUDA_VISIBLE_DEVICES decides what is visible).
int select_device_for_local_rank(int local_rank);

}  // namespace dyncp::kernels
