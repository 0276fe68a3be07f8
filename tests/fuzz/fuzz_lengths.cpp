// libFuzzer target: dyncp-plan's lengths file (one length a line, or JSON). Any input must end
// in a data error or positive lengths, never a crash or another exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "../../apps/dyncp-plan/lengths_file.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("dyncp_fuzz_lengths_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return (dir / "lengths.txt").string();
  }();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto file = dyncp::plan::read_lengths_file(path);
    for (const auto length : file.lengths) {
      if (length < 1) __builtin_trap();
    }
  } catch (const dyncp::core::Error& error) {
    if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  return 0;
}
