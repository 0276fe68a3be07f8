#include "train/save_folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace fs = std::filesystem;
using dyncp::train::LockHolder;
using dyncp::train::read_lock_holder;
using dyncp::train::SaveFolderLock;
using dyncp::train::SaveFolderLockOptions;
using dyncp::train::this_process_holder;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_lock_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_lock_file(const fs::path& dir, const std::string& host, std::int64_t pid,
                     const std::string& run_id) {
  std::ofstream out(dir / dyncp::train::save_folder_lock_name);
  out << R"({"host": ")" << host << R"(", "pid": )" << pid << R"(, "run_id": ")" << run_id
      << R"(", "started": "2026-12-01T00:00:00Z"})";
}

// Sets the lock file's modification time `seconds` into the past.
void age_lock_file(const fs::path& dir, std::int64_t seconds) {
  const fs::path path = dir / dyncp::train::save_folder_lock_name;
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = std::time(nullptr) - seconds;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::int64_t lock_file_age(const fs::path& dir) {
  struct stat status {};
  REQUIRE(::stat((dir / dyncp::train::save_folder_lock_name).c_str(), &status) == 0);
  return static_cast<std::int64_t>(std::time(nullptr) - status.st_mtim.tv_sec);
}

// A pid that names no process: a child that has exited and been reaped.
std::int64_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// Holds the OS lock on the current lock file through its own open file description, as a
// holder that is still around (or a file server keeping a dead client's lock) would.
struct OsLockHolder {
  explicit OsLockHolder(const fs::path& dir) {
    fd = ::open((dir / dyncp::train::save_folder_lock_name).c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  }
  ~OsLockHolder() { ::close(fd); }
  int fd = -1;
};

}  // namespace

TEST_CASE("a lock names its holder in the file and is removed on release", "[lock]") {
  const fs::path dir = fresh_dir("basic");
  {
    SaveFolderLock lock(dir, this_process_holder("run-a"));
    const auto holder = read_lock_holder(lock.path());
    REQUIRE(holder);
    CHECK(holder->pid == ::getpid());
    CHECK(holder->run_id == "run-a");
    CHECK(holder->host == this_process_holder("x").host);
    CHECK(holder->started.size() == 20);
    CHECK(lock.still_held());
  }
  CHECK_FALSE(fs::exists(dir / dyncp::train::save_folder_lock_name));
  SaveFolderLock again(dir, this_process_holder("run-b"));
  CHECK(read_lock_holder(again.path())->run_id == "run-b");
  fs::remove_all(dir);
}

TEST_CASE("a second run into a locked folder is refused naming the holder", "[lock]") {
  const fs::path dir = fresh_dir("live");
  int ready[2];
  int done[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(done) == 0);
  const pid_t child = ::fork();
  if (child == 0) {  // the live run: holds the lock until the parent is done
    {
      SaveFolderLock lock(dir, this_process_holder("first-run"));
      char byte = 1;
      (void)!::write(ready[1], &byte, 1);
      (void)!::read(done[0], &byte, 1);
    }
    ::_exit(0);
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  try {
    SaveFolderLock second(dir, this_process_holder("second-run"));
    FAIL("the second lock was granted");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("checkpoint.save"));
    CHECK_THAT(message, Catch::Contains("pid " + std::to_string(child)));
    CHECK_THAT(message, Catch::Contains("run id first-run"));
  }
  // The refused run left the holder's file alone.
  CHECK(read_lock_holder(dir / dyncp::train::save_folder_lock_name)->run_id == "first-run");
  (void)!::write(done[1], &byte, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK_FALSE(fs::exists(dir / dyncp::train::save_folder_lock_name));
  fs::remove_all(dir);
}

TEST_CASE("a lock file left by a process that died is taken over", "[lock]") {
  const fs::path dir = fresh_dir("dead");
  const std::string host = this_process_holder("x").host;
  write_lock_file(dir, host, dead_pid(), "crashed-run");
  SECTION("its OS lock is gone with it") {
    SaveFolderLock lock(dir, this_process_holder("new-run"));
    CHECK(read_lock_holder(lock.path())->run_id == "new-run");
  }
  SECTION("its OS lock is still held (a child kept the descriptor), the pid is gone") {
    OsLockHolder kept(dir);
    SaveFolderLock lock(dir, this_process_holder("new-run"));
    CHECK(read_lock_holder(lock.path())->run_id == "new-run");
    CHECK(lock.still_held());
  }
  fs::remove_all(dir);
}

TEST_CASE("a held lock whose holder stopped refreshing it is taken over", "[lock]") {
  const fs::path dir = fresh_dir("stale");
  SaveFolderLockOptions options;
  options.stale_after = std::chrono::seconds(60);
  auto first = std::make_unique<SaveFolderLock>(dir, this_process_holder("hung-run"));
  SECTION("refreshed recently: refused") {
    age_lock_file(dir, 30);
    CHECK_THROWS_WITH(SaveFolderLock(dir, this_process_holder("new-run"), options),
                      Catch::Contains("run id hung-run") && Catch::Contains("refreshed 30 s ago"));
  }
  SECTION("not refreshed for longer than stale_after: taken over") {
    age_lock_file(dir, 61);
    SaveFolderLock lock(dir, this_process_holder("new-run"), options);
    CHECK(read_lock_holder(lock.path())->run_id == "new-run");
    CHECK(lock.still_held());
    // The stale holder can tell, and its release leaves the new lock in place.
    CHECK_FALSE(first->still_held());
    first.reset();
    CHECK(fs::exists(lock.path()));
    CHECK(read_lock_holder(lock.path())->run_id == "new-run");
  }
  first.reset();
  fs::remove_all(dir);
}

TEST_CASE("a lock of another host counts as live until it stops being refreshed", "[lock]") {
  // A file system that does not share OS locks between hosts shows such a lock as free.
  const fs::path dir = fresh_dir("other_host");
  write_lock_file(dir, "some-other-node", 1, "remote-run");
  SaveFolderLockOptions options;
  options.stale_after = std::chrono::seconds(60);
  SECTION("recently refreshed: refused") {
    CHECK_THROWS_WITH(
        SaveFolderLock(dir, this_process_holder("new-run"), options),
        Catch::Contains("host some-other-node") && Catch::Contains("run id remote-run"));
  }
  SECTION("stale: taken over") {
    age_lock_file(dir, 120);
    SaveFolderLock lock(dir, this_process_holder("new-run"), options);
    CHECK(read_lock_holder(lock.path())->run_id == "new-run");
  }
  fs::remove_all(dir);
}

TEST_CASE("the holder refreshes its lock file in the background", "[lock]") {
  const fs::path dir = fresh_dir("refresh");
  SaveFolderLockOptions options;
  options.refresh_interval = std::chrono::seconds(1);
  SaveFolderLock lock(dir, this_process_holder("run"), options);
  age_lock_file(dir, 500);
  REQUIRE(lock_file_age(dir) >= 499);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK(lock_file_age(dir) <= 2);
  fs::remove_all(dir);
}

TEST_CASE("an unreadable lock file names no holder", "[lock]") {
  const fs::path dir = fresh_dir("garbage");
  const fs::path path = dir / dyncp::train::save_folder_lock_name;
  CHECK_FALSE(read_lock_holder(path));
  std::ofstream(path) << "{\"host\": 3}";
  CHECK_FALSE(read_lock_holder(path));
  std::ofstream(path) << "not json";
  CHECK_FALSE(read_lock_holder(path));
  // A free OS lock with a garbled file on this host: taken, the file rewritten.
  SaveFolderLock lock(dir, this_process_holder("run"));
  CHECK(read_lock_holder(path)->run_id == "run");
  fs::remove_all(dir);
}
