#pragma once
// A read-only memory mapping of a whole file (every rank maps the prepared cache; pages are
// shared through the page cache).

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace dyncp::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws a data error naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  void release();
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// An exclusive advisory lock (flock) on `path`, created if missing, held until destruction.
// Blocks while another process holds it.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  int descriptor_ = -1;
};

}  // namespace dyncp::data
