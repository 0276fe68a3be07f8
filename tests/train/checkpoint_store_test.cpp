#include "train/checkpoint_store.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "train/checkpoint_manifest.hpp"

namespace fs = std::filesystem;
using dyncp::core::OutputFile;
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
    OutputFile file(folder / "weights.bin");
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
  CHECK_FALSE(CheckpointStore::select(dir).has_value());
  for (int iteration : {10, 20, 30}) save(store, iteration, 100);
  CHECK(CheckpointStore::select(dir)->folder == dir / "iter_0000030");
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
  CHECK(CheckpointStore::select(dir)->folder == dir / "iter_0000001");
  CHECK(fs::file_size(dir / "iter_0000001" / "weights.bin") == 64);
  CHECK_FALSE(fs::exists(dir / "iter_0000002"));
  CHECK_FALSE(fs::exists(dir / ".tmp_iter_0000002"));
  fs::remove_all(dir);
}

TEST_CASE("a dangling latest pointer is a data error naming the file", "[train][ckpt]") {
  const fs::path dir = fresh_dir("dangling");
  fs::create_directories(dir);
  std::ofstream(dir / "latest") << "iter_0000099\n";
  REQUIRE_THROWS_WITH(CheckpointStore::select(dir),
                      Catch::Contains("latest") && Catch::Contains("iter_0000099"));
  fs::remove_all(dir);
}

TEST_CASE("pruning never removes the checkpoint just written nor newer ones", "[train][ckpt]") {
  // An earlier run left iterations 10..30; a new run (checkpoint.overwrite) saves iteration 5
  // with most_recent_k 2. Before: iter_0000005 was pruned as the "oldest" and latest dangled.
  const fs::path dir = fresh_dir("prune_newer");
  {
    CheckpointStore earlier(dir, -1);
    for (int iteration : {10, 20, 30}) save(earlier, iteration, 8);
  }
  CheckpointStore store(dir, 2);
  save(store, 5, 8);
  CHECK(fs::exists(dir / "iter_0000005"));
  for (const char* name : {"iter_0000010", "iter_0000020", "iter_0000030"})
    CHECK(fs::exists(dir / name));
  CHECK(CheckpointStore::select(dir)->iteration == 5);
  save(store, 6, 8);
  save(store, 7, 8);  // keeps 6 and 7 among those <= 7; the earlier run's newer ones stay
  CHECK_FALSE(fs::exists(dir / "iter_0000005"));
  CHECK(fs::exists(dir / "iter_0000006"));
  CHECK(fs::exists(dir / "iter_0000030"));
  CHECK(CheckpointStore::select(dir)->iteration == 7);
  fs::remove_all(dir);
}

TEST_CASE("a missing, empty or escaping latest falls back to the newest verified folder",
          "[train][ckpt]") {
  const fs::path dir = fresh_dir("latest_fallback");
  const fs::path other = fresh_dir("latest_other");
  CheckpointStore store(dir, -1);
  for (int iteration : {10, 20}) save(store, iteration, 8);
  CheckpointStore other_store(other, -1);
  save(other_store, 15, 8);

  SECTION("missing") {
    fs::remove(dir / "latest");
  }
  SECTION("empty") {
    std::ofstream(dir / "latest") << "\n";
  }
  SECTION("outside the folder") {
    std::ofstream(dir / "latest") << "../" << other.filename().string() << "/iter_0000015\n";
  }
  SECTION("an absolute path") {
    std::ofstream(dir / "latest") << (other / "iter_0000015").string();
  }
  SECTION("a folder that fails verification") {
    save(store, 30, 8);
    std::ofstream(dir / "iter_0000030" / "weights.bin", std::ios::in | std::ios::out) << "y";
  }
  const auto choice = CheckpointStore::select(dir);
  REQUIRE(choice.has_value());
  CHECK(choice->folder == dir / "iter_0000020");
  CHECK(choice->iteration == 20);
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("a folder whose checkpoints all fail verification is a data error naming the file",
          "[train][ckpt]") {
  const fs::path dir = fresh_dir("none_verify");
  CheckpointStore store(dir, -1);
  save(store, 10, 4096);
  const fs::path weights = dir / "iter_0000010" / "weights.bin";
  SECTION("a flipped bit") {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('x' ^ 0x01);
  }
  SECTION("a zeroed block") {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1024);
    const std::string zeros(512, '\0');
    file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  SECTION("truncated") {
    fs::resize_file(weights, 100);
  }
  SECTION("deleted") {
    fs::remove(weights);
  }
  SECTION("manifest deleted (an interrupted copy)") {
    fs::remove(dir / "iter_0000010" / "manifest.json");
  }
  REQUIRE_THROWS_AS(CheckpointStore::select(dir), dyncp::core::Error);
  try {
    CheckpointStore::select(dir);
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    CHECK_THAT(error.what(), Catch::Contains("iter_0000010"));
  }
  fs::remove_all(dir);
}

TEST_CASE("files from another iteration do not pass as this one", "[train][ckpt]") {
  const fs::path dir = fresh_dir("swapped");
  CheckpointStore store(dir, -1);
  save(store, 10, 64);
  {
    const fs::path folder = store.begin(20);
    OutputFile file(folder / "weights.bin");
    const std::string payload(64, 'z');
    file.write(payload.data(), payload.size());
    file.close();
    store.commit(20);
  }
  fs::copy_file(dir / "iter_0000010" / "weights.bin", dir / "iter_0000020" / "weights.bin",
                fs::copy_options::overwrite_existing);
  CHECK(CheckpointStore::select(dir)->iteration == 10);  // 20 fails, with a warning
  // The whole folder copied under another name: the manifest's iteration gives it away.
  fs::remove_all(dir / "iter_0000020");
  fs::copy(dir / "iter_0000010", dir / "iter_0000020");
  std::ofstream(dir / "latest") << "iter_0000020\n";
  CHECK(CheckpointStore::select(dir)->iteration == 10);
  REQUIRE_THROWS_WITH(CheckpointStore::select(dir, 20), Catch::Contains("records iteration 10"));
  fs::remove_all(dir);
}

TEST_CASE("ckpt_step picks exactly that iteration", "[train][ckpt]") {
  const fs::path dir = fresh_dir("ckpt_step");
  CheckpointStore store(dir, -1);
  for (int iteration : {10, 20, 30}) save(store, iteration, 8);
  CHECK(CheckpointStore::select(dir, 20)->folder == dir / "iter_0000020");
  REQUIRE_THROWS_WITH(CheckpointStore::select(dir, 25),
                      Catch::Contains("checkpoint.ckpt_step") && Catch::Contains("iter_0000025"));
  fs::remove_all(dir);
}

TEST_CASE("a manifest entry that leaves the folder is refused", "[train][ckpt]") {
  const fs::path dir = fresh_dir("manifest_escape");
  CheckpointStore store(dir, -1);
  save(store, 1, 8);
  std::ofstream(dir / "iter_0000001" / "manifest.json")
      << R"({"format": 1, "iteration": 1, "files": [{"path": "../latest", "bytes": 13, )"
      << R"("xxh3_64": "0000000000000000"}]})";
  REQUIRE_THROWS_WITH(dyncp::train::verify_checkpoint_manifest(dir / "iter_0000001"),
                      Catch::Contains("leaves the checkpoint folder"));
  fs::remove_all(dir);
}
