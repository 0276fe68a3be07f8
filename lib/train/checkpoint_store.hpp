#pragma once
// Where checkpoints live on disk and how they get there safely.
//
//   <save_dir>/iter_0000042/...      one folder per saved iteration
//   <save_dir>/latest                text file holding the newest complete folder's name
//
// A save writes into a hidden temporary folder, fsyncs, then renames it into place and only
// then updates `latest` (itself written to a temporary file and renamed). A crash or a full
// disk at any point leaves the previous checkpoint complete and `latest` pointing at it.
// Older folders beyond `keep_last` are removed after a successful save.
//
// Fault injection for tests: when DYNCP_FAULT_ENOSPC_AFTER_BYTES=N is set, writes made
// through `CheckpointFile` fail with ENOSPC once N bytes have been written in this process.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dyncp::train {

// A file written for a checkpoint: buffered, byte-counted, fault-injectable.
class CheckpointFile {
 public:
  explicit CheckpointFile(const std::filesystem::path& path);
  ~CheckpointFile();
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  void write(const void* data, std::size_t bytes);
  // Flush, fsync and close; throws on any failure (ENOSPC included).
  void close();

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

class CheckpointStore {
 public:
  CheckpointStore(std::filesystem::path save_dir, int keep_last);

  // Begin a save: returns the temporary folder to write into.
  std::filesystem::path begin(std::int64_t iteration);
  // Publish the folder returned by begin(): rename into place, update `latest`, prune.
  std::filesystem::path commit(std::int64_t iteration);
  // Drop a failed save's temporary folder (never touches published checkpoints).
  void abandon(std::int64_t iteration) noexcept;

  // Newest complete checkpoint under `dir` (by `latest`), or nullopt when there is none.
  static std::optional<std::filesystem::path> find_latest(const std::filesystem::path& dir);
  static std::string folder_name(std::int64_t iteration);

 private:
  std::filesystem::path temporary_folder(std::int64_t iteration) const;
  void prune() const;

  std::filesystem::path save_dir_;
  int keep_last_;
};

}  // namespace dyncp::train
