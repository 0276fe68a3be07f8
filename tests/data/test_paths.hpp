#pragma once
// Locations of the committed Qwen3 tokenizer and fixtures, plus a scratch folder.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "data/tokenizer.hpp"

namespace dyncp::data::test {

inline std::filesystem::path qwen3_tokenizer_dir() {
  return std::filesystem::path(DYNCP_SOURCE_DIR) / "tests" / "fixtures" / "tokenizers" / "qwen3";
}

inline std::filesystem::path fixture_path(const std::string& name) {
  return std::filesystem::path(DYNCP_SOURCE_DIR) / "tests" / "fixtures" / "data" / name;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Loading the 150k-token vocabulary takes a moment; share one instance per test binary.
inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_directory(qwen3_tokenizer_dir());
  return tokenizer;
}

// The committed demo tokenizer (tools/make_demo_data.py): small and quick to load.
inline const Tokenizer& demo_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_directory(fixture_path("demo") / "tokenizer");
  return tokenizer;
}

// A fresh, empty folder under the system temp dir, unique per test name.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("dyncp_data_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

}  // namespace dyncp::data::test
