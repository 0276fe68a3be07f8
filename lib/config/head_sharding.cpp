#include "config/head_sharding.hpp"

namespace dyncp::config {

std::string head_sharding_problem(std::int64_t query_heads, std::int64_t kv_heads,
                                  std::int64_t ranks) {
  if (ranks <= 1) return {};
  const std::string counts = std::to_string(query_heads) + " query heads and " +
                             std::to_string(kv_heads) + " K/V heads over a group of " +
                             std::to_string(ranks) + " ranks";
  if (query_heads <= 0 || kv_heads <= 0 || query_heads % kv_heads != 0) {
    return counts + ": the query heads must be a positive multiple of the K/V heads";
  }
  if (query_heads % ranks != 0) {
    return counts + ": the query heads must divide evenly over the group (" +
           std::to_string(query_heads) + " % " + std::to_string(ranks) + " != 0)";
  }
  if (kv_heads % ranks != 0 && ranks % kv_heads != 0) {
    return counts +
           ": the K/V heads must divide evenly over the group, or the group size be a "
           "multiple of them (K/V heads are then replicated)";
  }
  return {};
}

}  // namespace dyncp::config
