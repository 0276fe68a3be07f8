#pragma once
// Shared fixtures for the config tests: a small valid recipe (dynamic CP, cp 2, ep 2, valid
// for 2, 4 and 8 ranks) that each test breaks one key at a time through overrides.

#include <exception>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"

namespace dyncp::config::test {

inline const std::string valid_recipe = R"(
model:
  model_type: qwen3_moe
  vocab_size: 512
  hidden_size: 64
  num_hidden_layers: 2
  num_attention_heads: 4
  num_key_value_heads: 2
  head_dim: 16
  num_experts: 8
  num_experts_per_tok: 2
  moe_intermediate_size: 32
  context_parallel_size: 2
  expert_model_parallel_size: 2
  seq_length: 256
  dynamic_context_parallel: true
  max_seqlen_per_dp_cp_rank: 128
dataset:
  type: mock_varlen
  mock_length_distribution: uniform(min=8,max=256)
tokenizer:
  tokenizer_type: NullTokenizer
train:
  global_batch_size: 16
  train_iters: 10
)";

inline ConfigContainer load(const std::vector<std::string>& overrides = {}) {
  return load_config_text(valid_recipe, overrides, "valid.yaml");
}

// Load with overrides and resolve for `world_size` ranks.
inline ConfigContainer resolved(const std::vector<std::string>& overrides = {},
                                std::int64_t world_size = 4) {
  auto config = load(overrides);
  resolve_config(config, world_size);
  return config;
}

// The message resolving throws (empty when it resolves): for checks that need several parts.
inline std::string resolve_error(const std::vector<std::string>& overrides = {},
                                 std::int64_t world_size = 4) {
  try {
    resolved(overrides, world_size);
  } catch (const std::exception& error) {
    return error.what();
  }
  return {};
}

}  // namespace dyncp::config::test
