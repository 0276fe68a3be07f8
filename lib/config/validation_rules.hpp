#pragma once
// Internal to lib/config: the rule groups resolve_config runs. Each adds every problem it finds
// to `problems` and fills the derived values of its keys.

#include "config/config_container.hpp"
#include "config/problem_list.hpp"

namespace dyncp::config::detail {

// Parallel layout and global-batch packing rules (docs/config.md, "Rules").
void check_parallel_and_packing(ConfigContainer& config, std::int64_t world_size,
                                ProblemList& problems);

// Tensor parallelism: what tp splits divides evenly, etp is 1 or tp, etp x ep divides the
// world (tensor_parallel_rules.cpp; called by check_parallel_and_packing).
void check_tensor_parallel(ConfigContainer& config, std::int64_t world_size, ProblemList& problems);

// Model dimensions (heads vs KV heads, top-k vs experts, hybrid layer pattern, ...).
void check_model_architecture(ConfigContainer& config, ProblemList& problems);

// Data source, tokenizer, optimizer, LR schedule, recomputation, checkpointing, cost model.
void check_training(ConfigContainer& config, ProblemList& problems);

inline bool is_power_of_two(std::int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

}  // namespace dyncp::config::detail
