// libFuzzer target: an HF config.json through the model-config reader and the architecture
// rules. Any input must end in a data or config error or a valid architecture, never a crash,
// a hang or a huge allocation (sizes are bounded before anything is derived from them).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    auto path = std::filesystem::temp_directory_path() /
                ("dyncp_fuzz_hf_config_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const std::string recipe = "model:\n  hf_model_path: " + dir.string() +
                             "\n  seq_length: 256\n"
                             "dataset:\n  type: mock_varlen\n"
                             "  mock_length_distribution: uniform(min=8,max=256)\n"
                             "tokenizer:\n  tokenizer_type: NullTokenizer\n"
                             "train:\n  global_batch_size: 4\n  train_iters: 1\n";
  try {
    auto config = dyncp::config::load_config_text(recipe, {}, "fuzz.yaml");
    dyncp::config::resolve_config(config, 1);
  } catch (const dyncp::core::Error& error) {
    if (error.exit_code() != 2) __builtin_trap();
  }
  return 0;
}
