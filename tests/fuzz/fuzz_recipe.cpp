// libFuzzer target: a recipe (YAML) plus overrides through the loader and the validator. The
// input is the recipe text; a line "--" splits off override lines after it. Any input must end
// in a config or data error (exit 2) or a valid config, never a crash, a hang, another
// exception or unbounded memory (aliases, depth, document count and sizes are bounded).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string recipe = input;
  std::vector<std::string> overrides;
  if (const auto split = input.find("\n--\n"); split != std::string::npos) {
    recipe = input.substr(0, split);
    std::istringstream lines(input.substr(split + 4));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  try {
    auto config = dyncp::config::load_config_text(recipe, overrides, "fuzz.yaml");
    dyncp::config::resolve_config(config, 4);
  } catch (const dyncp::core::Error& error) {
    if (error.exit_code() != 2) __builtin_trap();
  }
  return 0;
}
