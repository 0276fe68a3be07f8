#pragma once
// One live run per checkpoint.save folder. Two runs writing into one folder (a job resubmitted
// while the first still runs) would race on `latest` and interleave their checkpoints, so the
// run's rank 0 holds a lock there from start-up to exit:
//
//   <save>/.dyncp.lock   {"host": "node17", "pid": 4242, "run_id": "20261203-134000-4f2a9c",
//                         "started": "2026-12-03T13:40:00Z"}
//
// The lock is an OS file lock (flock, exclusive, on the open lock file) plus the holder's
// identity in the file; the holder refreshes the file's modification time every
// refresh_interval from a background thread, so a live holder is recognisable even where the
// OS lock cannot be trusted (a file server that keeps a crashed client's lock).
//
// Acquiring:
//   the OS lock is free                 taken. When the file names another holder (a process
//                                       that died without removing it), that is a warning
//                                       naming the holder being replaced; a holder on another
//                                       host must also have stopped refreshing (a file system
//                                       may not share OS locks between hosts), else refused.
//   the OS lock is held, and
//     the holder is on this host and its pid no longer exists, or
//     the file was not refreshed for stale_after
//                                       the holder is judged dead: the lock is taken over with
//                                       a warning naming it (a new lock file renamed over the
//                                       old one, so the stale holder keeps only an unlinked
//                                       file and can tell, still_held()).
//     otherwise                         refused: a config error on checkpoint.save (exit 2)
//                                       naming the holder's host, pid, run id and start time.
//
// Releasing (destructor) removes the lock file, then drops the OS lock. The file descriptor is
// close-on-exec, so child processes (the W&B sidecar) never keep the lock alive.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace dyncp::train {

inline constexpr const char* save_folder_lock_name = ".dyncp.lock";

struct LockHolder {
  std::string host;
  std::int64_t pid = 0;
  std::string run_id;
  std::string started;  // UTC, ISO 8601
};

struct SaveFolderLockOptions {
  // How often the holder touches the lock file.
  std::chrono::seconds refresh_interval{30};
  // A held lock not touched for this long belongs to a holder that stopped (hung, or a node
  // that died holding a lock its file server keeps).
  std::chrono::seconds stale_after{120};
};

// This process as a holder: gethostname(), getpid(), the run id, now.
LockHolder this_process_holder(const std::string& run_id);

// The lock file's holder as written, or nullopt when the file is missing, empty or unreadable.
std::optional<LockHolder> read_lock_holder(const std::filesystem::path& lock_file);

class SaveFolderLock {
 public:
  // Acquires the lock of `folder` (which must exist) by the rules above; throws a config error
  // on checkpoint.save when a live run holds it, a runtime error when the file cannot be made.
  SaveFolderLock(const std::filesystem::path& folder, LockHolder holder,
                 SaveFolderLockOptions options = {});
  ~SaveFolderLock();
  SaveFolderLock(const SaveFolderLock&) = delete;
  SaveFolderLock& operator=(const SaveFolderLock&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Whether the lock file is still the one this process locked (false once another run took
  // it over, judging this one stale).
  bool still_held() const;
  // Touches the lock file now (the background thread does so every refresh_interval).
  void refresh() const;

 private:
  void take_free_or_stale();
  [[noreturn]] void refuse(const std::optional<LockHolder>& holder, std::int64_t age) const;
  void write_holder(int fd) const;
  void refresh_loop();

  std::filesystem::path path_;
  LockHolder holder_;
  SaveFolderLockOptions options_;
  int fd_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread refresher_;
};

}  // namespace dyncp::train
