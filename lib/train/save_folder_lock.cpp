#include "train/save_folder_lock.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t max_lock_file_bytes = 4096;
constexpr int max_attempts = 8;

[[noreturn]] void throw_lock_error(const fs::path& path, const std::string& what) {
  core::throw_runtime_error("checkpoint.save lock: " + what + " '" + path.string() +
                            "' failed: " + std::strerror(errno));
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string describe(const std::optional<LockHolder>& holder) {
  if (!holder) return "an unknown holder (the lock file names none)";
  return "host " + holder->host + ", pid " + std::to_string(holder->pid) + ", run id " +
         holder->run_id + ", started " + holder->started;
}

bool same_inode(int fd, const fs::path& path) {
  struct stat by_fd {};
  struct stat by_path {};
  if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

// Seconds since the file behind `fd` was last touched.
std::int64_t seconds_since_refresh(int fd) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return 0;
  return static_cast<std::int64_t>(std::time(nullptr) - status.st_mtim.tv_sec);
}

// Same host and the pid names no process. EPERM means it exists (another user's).
bool holder_is_gone(const LockHolder& holder, const std::string& this_host) {
  if (holder.host != this_host || holder.pid <= 0) return false;
  return ::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

LockHolder this_process_holder(const std::string& run_id) {
  return LockHolder{host_name(), static_cast<std::int64_t>(::getpid()), run_id, utc_now()};
}

std::optional<LockHolder> read_lock_holder(const fs::path& lock_file) {
  std::error_code error;
  if (!fs::is_regular_file(lock_file, error) ||
      fs::file_size(lock_file, error) > max_lock_file_bytes)
    return std::nullopt;
  std::ifstream in(lock_file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("host") || !json["host"].is_string() ||
      !json.contains("pid") || !json["pid"].is_number_integer() || !json.contains("run_id") ||
      !json["run_id"].is_string() || !json.contains("started") || !json["started"].is_string())
    return std::nullopt;
  return LockHolder{json["host"].get<std::string>(), json["pid"].get<std::int64_t>(),
                    json["run_id"].get<std::string>(), json["started"].get<std::string>()};
}

SaveFolderLock::SaveFolderLock(const fs::path& folder, LockHolder holder,
                               SaveFolderLockOptions options)
    : path_(folder / save_folder_lock_name), holder_(std::move(holder)), options_(options) {
  take_free_or_stale();
  refresher_ = std::thread([this] { refresh_loop(); });
}

SaveFolderLock::~SaveFolderLock() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (refresher_.joinable()) refresher_.join();
  // Removed while still locked: a run waiting on the old file finds it unlinked and retries.
  if (still_held()) ::unlink(path_.c_str());
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

void SaveFolderLock::write_holder(int fd) const {
  const nlohmann::json json = {{"host", holder_.host},
                               {"pid", holder_.pid},
                               {"run_id", holder_.run_id},
                               {"started", holder_.started}};
  const std::string text = json.dump() + "\n";
  if (::ftruncate(fd, 0) != 0) throw_lock_error(path_, "truncating");
  if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw_lock_error(path_, "writing");
  if (::fsync(fd) != 0) throw_lock_error(path_, "fsyncing");
}

void SaveFolderLock::take_free_or_stale() {
  const std::string this_host = host_name();
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw_lock_error(path_, "opening");
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Between open and flock the previous holder may have removed or replaced the file.
      if (!same_inode(fd, path_)) {
        ::close(fd);
        continue;
      }
      const std::optional<LockHolder> previous = read_lock_holder(path_);
      // A free OS lock proves the holder gone only on its own host: a file system that does
      // not share locks between hosts shows another host's live lock as free, so a holder
      // elsewhere must also have stopped refreshing.
      const std::int64_t age = seconds_since_refresh(fd);
      if (previous && previous->host != this_host && age <= options_.stale_after.count()) {
        ::close(fd);
        refuse(previous, age);
      }
      if (previous) {
        spdlog::warn("{}: taking over the lock left by {}: {}", path_.string(), describe(previous),
                     previous->host == this_host
                         ? std::string("that process is gone (its OS lock was released without "
                                       "removing the file)")
                         : "it was not refreshed for " + std::to_string(age) + " s");
      }
      write_holder(fd);
      fd_ = fd;
      return;
    }
    if (errno != EWOULDBLOCK) {
      ::close(fd);
      throw_lock_error(path_, "locking");
    }
    const std::optional<LockHolder> current = read_lock_holder(path_);
    const std::int64_t age = seconds_since_refresh(fd);
    const bool gone = current && holder_is_gone(*current, this_host);
    const bool stale = age > options_.stale_after.count();
    if (!gone && !stale) {
      ::close(fd);
      refuse(current, age);
    }
    // A new lock file renamed over the stale one: its holder keeps only an unlinked file.
    const fs::path fresh = path_.string() + "." + std::to_string(::getpid()) + ".tmp";
    const int fresh_fd = ::open(fresh.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fresh_fd < 0) {
      ::close(fd);
      throw_lock_error(fresh, "creating");
    }
    if (::flock(fresh_fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      ::close(fresh_fd);
      throw_lock_error(fresh, "locking");
    }
    write_holder(fresh_fd);
    if (::rename(fresh.c_str(), path_.c_str()) != 0) {
      ::close(fd);
      ::close(fresh_fd);
      ::unlink(fresh.c_str());
      throw_lock_error(path_, "renaming into");
    }
    ::close(fd);
    spdlog::warn("{}: taking over the lock left by {}: {}", path_.string(), describe(current),
                 gone ? "no process with that pid exists on this host"
                      : "it was not refreshed for " + std::to_string(age) + " s");
    fd_ = fresh_fd;
    return;
  }
  core::throw_runtime_error("checkpoint.save lock: " + path_.string() + " changed under " +
                            std::to_string(max_attempts) +
                            " attempts to lock it: another run is starting there at the same time");
}

void SaveFolderLock::refuse(const std::optional<LockHolder>& holder, std::int64_t age) const {
  core::throw_config_error(
      "checkpoint.save",
      path_.parent_path().string() + " is in use by a live run: " + describe(holder) +
          " (lock file " + path_.string() + ", refreshed " + std::to_string(age) +
          " s ago). Two runs saving into one folder would mix their checkpoints: wait for that "
          "run to end or stop it, or save elsewhere (a lock not refreshed for " +
          std::to_string(options_.stale_after.count()) + " s is taken over)");
}

bool SaveFolderLock::still_held() const {
  return fd_ >= 0 && same_inode(fd_, path_);
}

void SaveFolderLock::refresh() const {
  if (::futimens(fd_, nullptr) != 0)
    spdlog::warn("{}: refreshing the lock failed: {}", path_.string(), std::strerror(errno));
}

void SaveFolderLock::refresh_loop() {
  std::unique_lock<std::mutex> guard(mutex_);
  while (!wake_.wait_for(guard, options_.refresh_interval, [this] { return stopping_; })) {
    refresh();
    if (!still_held()) {
      spdlog::error(
          "{}: another run took over this run's lock on the save folder (it judged this run "
          "stale); this run's further checkpoints may mix with that run's",
          path_.string());
      return;
    }
  }
}

}  // namespace dyncp::train
