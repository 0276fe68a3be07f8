#pragma once
// One spelling of a kernel launch and of dynamic shared memory for both builds of kernels/:
// nvcc, and the emulated backend (kernels/emulation/), where the same source is host C++ and
// these macros come from the emulated cuda_runtime.h.
#include <cuda_runtime.h>

#ifndef DYNCP_CUDA_EMULATION
// kernel<<<grid, block, shared_bytes, stream>>>(args...)
#define DYNCP_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#define DYNCP_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif
