#pragma once
// A streaming 64-bit FNV-1a hash: identifies file contents and settings in the preparation cache
// key. Not cryptographic; collisions only matter between caches in one cache directory.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dyncp::data {

class ContentHasher {
 public:
  ContentHasher& update(std::string_view bytes);
  ContentHasher& update(std::uint64_t value);
  // Hashes the length first so that ("ab","c") and ("a","bc") differ.
  ContentHasher& update_field(std::string_view bytes);
  std::uint64_t digest() const { return state_; }

 private:
  std::uint64_t state_ = 0xcbf29ce484222325ULL;
};

// Hash of a whole file's bytes; throws a data error naming the file when it cannot be read.
std::uint64_t hash_file(const std::filesystem::path& path);

// 16 lowercase hex digits.
std::string hex_digest(std::uint64_t digest);

}  // namespace dyncp::data
