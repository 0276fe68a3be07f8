#pragma once
// Shared by the scheduler tests: the cost model and a random layout.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_model.hpp"

namespace dyncp::packing::testing {

// Qwen3-30B-A3B on H200 defaults, the benchmark's cost model.
inline const CostModel& qwen3_cost() {
  static const CostModel cost(model_cost_from_architecture(qwen3_30b_a3b_architecture()), {});
  return cost;
}

struct RandomLayout {
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t cap = 1024;
  std::int64_t min_group_size = 1;
  std::size_t samples = 1;
};

// A pool of 2 .. 2^(max_pool_log2 + 1) ranks, cp a power of two up to 8, cap 1K..8K, one in six
// with a minimum group of 2, 1..12 samples per DP replica.
inline RandomLayout random_layout(core::Rng& rng, std::uint64_t max_pool_log2) {
  RandomLayout layout;
  const std::int64_t pool = std::int64_t{2} << rng.below(max_pool_log2);
  while (layout.context_parallel_size < 8 && layout.context_parallel_size * 2 <= pool &&
         rng.below(3) != 0)
    layout.context_parallel_size *= 2;
  layout.data_parallel_size = pool / layout.context_parallel_size;
  layout.cap = std::int64_t{1024} << rng.below(4);
  layout.min_group_size = rng.below(6) == 0 ? std::min<std::int64_t>(2, pool) : 1;
  layout.samples = static_cast<std::size_t>(layout.data_parallel_size *
                                            static_cast<std::int64_t>(1 + rng.below(12)));
  return layout;
}

// Caps real lengths at cp x cap rounded down to a multiple of 2 dp cp, so that the static
// layout can run every one under either padding rule (as the benchmark does); false when the
// cap leaves no room for even one multiple.
inline bool cap_for_static_layout(std::vector<std::int64_t>& lengths, std::int64_t dp,
                                  std::int64_t cp, std::int64_t cap) {
  const std::int64_t multiple = alignment_multiple({dp, cp, true});
  const std::int64_t longest = cp * cap / multiple * multiple;
  if (longest < multiple) return false;
  for (auto& length : lengths) length = std::min(length, longest);
  return true;
}

}  // namespace dyncp::packing::testing
