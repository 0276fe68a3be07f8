#include "train/checkpoint_store.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace fs = std::filesystem;
using dyncp::train::CheckpointFile;
using dyncp::train::CheckpointStore;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_ckpt_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

void save(CheckpointStore& store, std::int64_t iteration, std::size_t bytes) {
  const fs::path folder = store.begin(iteration);
  try {
    CheckpointFile file(folder / "weights.bin");
    const std::string payload(bytes, 'x');
    file.write(payload.data(), payload.size());
    file.close();
  } catch (...) {
    store.abandon(iteration);
    throw;
  }
  store.commit(iteration);
}

}  // namespace

TEST_CASE("checkpoint store publishes folders atomically and keeps the last N", "[train][ckpt]") {
  const fs::path dir = fresh_dir("keep");
  CheckpointStore store(dir, 2);
  CHECK_FALSE(CheckpointStore::find_latest(dir).has_value());
  for (int iteration : {10, 20, 30}) save(store, iteration, 100);
  CHECK(*CheckpointStore::find_latest(dir) == dir / "iter_0000030");
  CHECK_FALSE(fs::exists(dir / "iter_0000010"));
  CHECK(fs::exists(dir / "iter_0000020"));
  CHECK(fs::file_size(dir / "iter_0000030" / "weights.bin") == 100);
  fs::remove_all(dir);
}

TEST_CASE("a full disk during a save leaves the previous checkpoint usable", "[train][ckpt]") {
  const fs::path dir = fresh_dir("enospc");
  CheckpointStore store(dir, 3);
  save(store, 1, 64);
  ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "0", 1);  // every further write fails
  REQUIRE_THROWS_WITH(save(store, 2, 64), Catch::Contains("No space left on device"));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  CHECK(*CheckpointStore::find_latest(dir) == dir / "iter_0000001");
  CHECK(fs::file_size(dir / "iter_0000001" / "weights.bin") == 64);
  CHECK_FALSE(fs::exists(dir / "iter_0000002"));
  CHECK_FALSE(fs::exists(dir / ".tmp_iter_0000002"));
  fs::remove_all(dir);
}

TEST_CASE("a dangling latest pointer is a data error naming the file", "[train][ckpt]") {
  const fs::path dir = fresh_dir("dangling");
  fs::create_directories(dir);
  std::ofstream(dir / "latest") << "iter_0000099\n";
  REQUIRE_THROWS_WITH(CheckpointStore::find_latest(dir),
                      Catch::Contains("latest") && Catch::Contains("iter_0000099"));
  fs::remove_all(dir);
}
