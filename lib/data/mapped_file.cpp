#include "data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace dyncp::data {

MappedFile::MappedFile(const std::filesystem::path& path) {
  // Before open(): opening a FIFO blocks, and a device's size says nothing about its content.
  core::require_regular_file(path, "the data file");
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) {
    core::throw_data_error(path.string(), std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat status {};
  if (::fstat(descriptor, &status) != 0) {
    ::close(descriptor);
    core::throw_data_error(path.string(), std::string("cannot stat: ") + std::strerror(errno));
  }
  size_ = static_cast<std::size_t>(status.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, descriptor, 0);
    if (mapping == MAP_FAILED) {
      ::close(descriptor);
      core::throw_data_error(path.string(), std::string("cannot mmap: ") + std::strerror(errno));
    }
    data_ = static_cast<const std::byte*>(mapping);
  }
  ::close(descriptor);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  release();
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

FileLock::FileLock(const std::filesystem::path& path) {
  descriptor_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (descriptor_ < 0) {
    core::throw_data_error(path.string(),
                           std::string("cannot create lock file: ") + std::strerror(errno));
  }
  while (::flock(descriptor_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(descriptor_);
      core::throw_runtime_error("cannot lock " + path.string() + ": " + std::strerror(errno));
    }
  }
}

FileLock::~FileLock() {
  if (descriptor_ >= 0) {
    ::flock(descriptor_, LOCK_UN);
    ::close(descriptor_);
  }
}

}  // namespace dyncp::data
