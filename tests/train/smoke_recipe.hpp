#pragma once
// The smoke recipe (configs/smoke/tiny_mock.yaml: the tiny Qwen3-MoE on mock data, cp 2, dynamic
// CP, EP 2) resolved for a world, with overrides: the config the train tests start from.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"

namespace dyncp::test {

inline config::ConfigContainer smoke_config(std::int64_t world_size,
                                            const std::vector<std::string>& overrides = {}) {
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml", overrides);
  config::resolve_config(config, world_size);
  return config;
}

}  // namespace dyncp::test
