#pragma once
// Which keys a query sees, shared by the attention kernels (internal to kernels/): the rule of
// lib/ops/attention.hpp on global positions.
//
// The tensor-core kernels give padding query rows the position INT_MIN and padding keys
// INT_MAX, so `kv <= q` alone rejects them; the window differences are taken in 64 bits, so
// neither a sentinel nor a large real position can overflow them.

#include <cuda_runtime.h>

#include <cstdint>

namespace dyncp::kernels::attention_detail {

// Key position kv is visible to query position q: not in its future and, with a sliding
// window w > 0, fewer than w positions back.
__host__ __device__ inline bool key_visible(int kv, int q, int window) {
  return kv <= q && (window <= 0 || static_cast<std::int64_t>(q) - kv < window);
}

// No query with a position in [q_min, q_max] sees any key with a position in
// [kv_min, kv_max]: every key is in every query's future, or a window or more behind the
// earliest query.
__host__ __device__ inline bool tile_hidden(int q_min, int q_max, int kv_min, int kv_max,
                                            int window) {
  return kv_min > q_max || (window > 0 && static_cast<std::int64_t>(q_min) - kv_max >= window);
}

}  // namespace dyncp::kernels::attention_detail
