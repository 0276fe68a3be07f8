#include "core/output_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.hpp"

namespace dyncp::core {

namespace {

// Bytes written by this process to the files fault injection targets.
std::atomic<std::uint64_t> bytes_written_in_process{0};

// The injected limit for writes to `path`, when DYNCP_FAULT_ENOSPC_AFTER_BYTES is set and
// DYNCP_FAULT_ENOSPC_FILE is unset or names this file.
std::optional<std::uint64_t> injected_enospc_limit(const std::filesystem::path& path) {
  const char* value = std::getenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  if (value == nullptr || *value == '\0') return std::nullopt;
  const char* file = std::getenv("DYNCP_FAULT_ENOSPC_FILE");
  if (file != nullptr && *file != '\0' && path.filename() != file) return std::nullopt;
  return std::strtoull(value, nullptr, 10);
}

[[noreturn]] void throw_write_error(const std::filesystem::path& path, const char* what,
                                    int error) {
  throw_runtime_error(std::string(what) + " '" + path.string() +
                      "' failed: " + std::strerror(error));
}

}  // namespace

void check_injected_write_fault(const std::filesystem::path& path, std::size_t bytes) {
  const auto limit = injected_enospc_limit(path);
  if (!limit) return;
  if (bytes_written_in_process.load() + bytes > *limit) throw_write_error(path, "writing", ENOSPC);
  bytes_written_in_process += bytes;
}

OutputFile::OutputFile(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) throw_write_error(path, "opening", errno);
}

OutputFile::~OutputFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void OutputFile::write(const void* data, std::size_t bytes) {
  const auto limit = injected_enospc_limit(path_);
  if (limit && bytes_written_in_process.load() + bytes > *limit)
    throw_write_error(path_, "writing", ENOSPC);
  if (std::fwrite(data, 1, bytes, file_) != bytes) throw_write_error(path_, "writing", errno);
  if (limit) bytes_written_in_process += bytes;
}

void OutputFile::close() {
  if (file_ == nullptr) return;
  std::FILE* file = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  const int error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!flushed || !closed) throw_write_error(path_, "closing", flushed ? errno : error);
}

void write_file_replacing(const std::filesystem::path& path,
                          const std::function<void(OutputFile&)>& write,
                          std::string_view temporary_suffix) {
  std::filesystem::path temporary = path;
  temporary += temporary_suffix;
  try {
    OutputFile out(temporary);
    write(out);
    out.close();
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error) {
      throw_runtime_error("renaming '" + temporary.string() + "' to '" + path.string() +
                          "' failed: " + error.message());
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

void ignore_file_size_limit_signal() {
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace dyncp::core
