// libFuzzer target: a Megatron indexed dataset (.idx and .bin) through the reader. The input's
// first 2 bytes give the .idx length (little-endian); the .idx bytes follow, the rest is the
// .bin. Any input must end in a data error or documents whose every token is read inside the
// file, never a crash (pointer + length overflows) or a truncated token id.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/indexed_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path prefix = [] {
    auto dir = std::filesystem::temp_directory_path() /
               ("dyncp_fuzz_indexed_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir / "docs";
  }();
  if (size < 2) return 0;
  const std::size_t index_bytes = std::min<std::size_t>(size - 2, data[0] | (data[1] << 8));
  const auto write = [](const std::string& path, const std::uint8_t* bytes, std::size_t count) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(count));
  };
  write(prefix.string() + ".idx", data + 2, index_bytes);
  write(prefix.string() + ".bin", data + 2 + index_bytes, size - 2 - index_bytes);
  try {
    const dyncp::data::IndexedDataset dataset(prefix);
    std::vector<std::int32_t> tokens;
    for (std::int64_t document = 0; document < dataset.num_documents(); ++document) {
      tokens.clear();
      try {
        dataset.read_document(document, tokens);
      } catch (const dyncp::core::Error& error) {
        if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
        continue;
      }
      if (static_cast<std::int64_t>(tokens.size()) != dataset.document_length(document))
        __builtin_trap();
      for (const std::int32_t id : tokens) {
        if (id < 0) __builtin_trap();
      }
    }
  } catch (const dyncp::core::Error& error) {
    if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  return 0;
}
