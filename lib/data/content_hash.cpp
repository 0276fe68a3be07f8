#include "data/content_hash.hpp"

#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace dyncp::data {

ContentHasher& ContentHasher::update(std::string_view bytes) {
  std::uint64_t state = state_;
  for (const char byte : bytes) {
    state ^= static_cast<unsigned char>(byte);
    state *= 0x100000001b3ULL;
  }
  state_ = state;
  return *this;
}

ContentHasher& ContentHasher::update(std::uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return update(std::string_view(bytes, 8));
}

ContentHasher& ContentHasher::update_field(std::string_view bytes) {
  update(static_cast<std::uint64_t>(bytes.size()));
  return update(bytes);
}

std::uint64_t hash_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) core::throw_data_error(path.string(), "cannot open file for reading");
  ContentHasher hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.update(std::string_view(buffer.data(), static_cast<std::size_t>(in.gcount())));
  }
  return hasher.digest();
}

std::string hex_digest(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace dyncp::data
