#pragma once
// Stand-ins for CUDA's asynchronous shared-memory copies (cp.async through
// <cuda_pipeline_primitives.h>). Each thread's copies wait in its own queue, in commit
// batches, and land only when __pipeline_wait_prior lets them (every batch but the `prior`
// most recent committed ones), so a kernel that reads a tile before waiting for it reads the
// stale (NaN-filled) shared memory here, as it may on a GPU. Copies still queued when a block
// ends are dropped.

#include <cstddef>

namespace dyncp::emulation {
void pipeline_memcpy_async(void* dst_shared, const void* src_global, std::size_t bytes);
void pipeline_commit();
void pipeline_wait_prior(std::size_t prior);
}  // namespace dyncp::emulation

inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global,
                                    std::size_t size_and_align, std::size_t zfill = 0) {
  (void)zfill;
  ::dyncp::emulation::pipeline_memcpy_async(dst_shared, src_global, size_and_align);
}
inline void __pipeline_commit() {
  ::dyncp::emulation::pipeline_commit();
}
inline void __pipeline_wait_prior(std::size_t prior) {
  ::dyncp::emulation::pipeline_wait_prior(prior);
}
