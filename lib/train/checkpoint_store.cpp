#include "train/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// Bytes written through CheckpointFile by this process (for fault injection only).
std::atomic<std::uint64_t> bytes_written_in_process{0};

std::optional<std::uint64_t> injected_enospc_limit() {
  const char* value = std::getenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::strtoull(value, nullptr, 10);
}

[[noreturn]] void throw_io_error(const fs::path& path, const std::string& what, int error) {
  core::throw_runtime_error("checkpoint: " + what + " '" + path.string() +
                            "' failed: " + std::strerror(error));
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;  // best effort for directories on filesystems that refuse it
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

CheckpointFile::CheckpointFile(const fs::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) throw_io_error(path, "opening", errno);
}

CheckpointFile::~CheckpointFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void CheckpointFile::write(const void* data, std::size_t bytes) {
  if (const auto limit = injected_enospc_limit()) {
    if (bytes_written_in_process.load() + bytes > *limit) throw_io_error(path_, "writing", ENOSPC);
  }
  if (std::fwrite(data, 1, bytes, file_) != bytes) throw_io_error(path_, "writing", errno);
  bytes_written_in_process += bytes;
}

void CheckpointFile::close() {
  if (file_ == nullptr) return;
  std::FILE* file = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  const int error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!flushed || !closed) throw_io_error(path_, "closing", error);
}

CheckpointStore::CheckpointStore(fs::path save_dir, int keep_last)
    : save_dir_(std::move(save_dir)), keep_last_(keep_last) {}

std::string CheckpointStore::folder_name(std::int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(iteration));
  return name;
}

fs::path CheckpointStore::temporary_folder(std::int64_t iteration) const {
  return save_dir_ / (".tmp_" + folder_name(iteration));
}

fs::path CheckpointStore::begin(std::int64_t iteration) {
  std::error_code error;
  fs::create_directories(save_dir_, error);
  if (error) throw_io_error(save_dir_, "creating", error.value());
  const fs::path folder = temporary_folder(iteration);
  fs::remove_all(folder, error);  // leftovers of an earlier crashed save
  fs::create_directories(folder, error);
  if (error) throw_io_error(folder, "creating", error.value());
  return folder;
}

fs::path CheckpointStore::commit(std::int64_t iteration) {
  const fs::path folder = temporary_folder(iteration);
  const fs::path final_folder = save_dir_ / folder_name(iteration);
  fsync_path(folder);
  std::error_code error;
  fs::remove_all(final_folder, error);  // re-saving the same iteration replaces it
  fs::rename(folder, final_folder, error);
  if (error) throw_io_error(final_folder, "renaming into", error.value());

  const fs::path latest_tmp = save_dir_ / ".latest.tmp";
  {
    CheckpointFile latest(latest_tmp);
    const std::string name = folder_name(iteration) + "\n";
    latest.write(name.data(), name.size());
    latest.close();
  }
  fs::rename(latest_tmp, save_dir_ / "latest", error);
  if (error) throw_io_error(save_dir_ / "latest", "renaming into", error.value());
  fsync_path(save_dir_);
  prune();
  return final_folder;
}

void CheckpointStore::abandon(std::int64_t iteration) noexcept {
  std::error_code ignored;
  fs::remove_all(temporary_folder(iteration), ignored);
  fs::remove(save_dir_ / ".latest.tmp", ignored);
}

void CheckpointStore::prune() const {
  if (keep_last_ <= 0) return;
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(save_dir_)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("iter_", 0) == 0) folders.push_back(name);
  }
  std::sort(folders.begin(), folders.end());  // zero-padded: lexicographic == numeric
  const auto excess = static_cast<std::ptrdiff_t>(folders.size()) - keep_last_;
  for (std::ptrdiff_t i = 0; i < excess; ++i) {
    std::error_code ignored;
    fs::remove_all(save_dir_ / folders[static_cast<std::size_t>(i)], ignored);
  }
}

std::optional<fs::path> CheckpointStore::find_latest(const fs::path& dir) {
  std::ifstream latest(dir / "latest");
  std::string name;
  if (!latest || !std::getline(latest, name) || name.empty()) return std::nullopt;
  const fs::path folder = dir / name;
  if (!fs::is_directory(folder)) {
    core::throw_data_error((dir / "latest").string(),
                           "points at '" + name + "', which does not exist");
  }
  return folder;
}

}  // namespace dyncp::train
