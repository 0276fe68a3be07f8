// dataset.num_workers: the preparation threads. The thread count changes who converts a line,
// never what the prepared cache holds.
#include "data/record_workers.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "data/prepared_dataset.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::demo_tokenizer;
using dyncp::data::test::fixture_path;
using dyncp::data::test::read_file;
using dyncp::data::test::scratch_dir;
using dyncp::data::test::write_file;

TEST_CASE("each of N workers converts one contiguous slice on its own thread", "[data][workers]") {
  const int workers = GENERATE(1, 2, 3, 7);
  const std::size_t count = 20;
  std::vector<int> worker_of(count, -1);
  std::vector<std::thread::id> thread_of(count);
  for_each_in_slices(count, workers, [&](std::size_t index, int worker) {
    worker_of[index] = worker;  // each index is written by one thread only
    thread_of[index] = std::this_thread::get_id();
  });
  std::set<std::thread::id> threads(thread_of.begin(), thread_of.end());
  CHECK(static_cast<int>(threads.size()) == workers);      // N threads did the work
  CHECK(thread_of.front() == std::this_thread::get_id());  // worker 0 is the caller
  // Worker w converts exactly the slice [w * count / workers, (w + 1) * count / workers).
  for (int worker = 0; worker < workers; ++worker) {
    const std::size_t begin = static_cast<std::size_t>(worker) * count / workers;
    const std::size_t end = static_cast<std::size_t>(worker + 1) * count / workers;
    for (std::size_t index = begin; index < end; ++index) {
      INFO("worker " << worker << ", index " << index);
      CHECK(worker_of[index] == worker);
      CHECK(thread_of[index] == thread_of[begin]);
    }
  }
  // 0 (Megatron's "load in the main process") is the calling thread alone.
  std::set<std::thread::id> zero;
  std::mutex mutex;
  for_each_in_slices(5, 0, [&](std::size_t, int) {
    const std::lock_guard<std::mutex> lock(mutex);
    zero.insert(std::this_thread::get_id());
  });
  CHECK(zero == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("the prepared cache is byte-identical for 1 and N preparation threads",
          "[data][workers]") {
  // The demo chat set three times over (120 records, batches of 64 x N lines cut across it)
  // with a bad line and an over-long one among them: kept samples, filtering counts and the
  // order of everything must not depend on the thread count.
  const auto dir = scratch_dir("workers_identical");
  const std::string demo = read_file(fixture_path("demo") / "train.jsonl");
  write_file(dir / "chat.jsonl", demo + "{\"messages\": [}\n" + demo + demo);
  const Tokenizer& tokenizer = demo_tokenizer();
  const auto prepare_with = [&](int workers) {
    PrepareOptions options;
    options.inputs = {{dir / "chat.jsonl", DatasetFormat::chat_jsonl}};
    options.cache_dir = dir / ("cache_" + std::to_string(workers));
    options.seq_length = 96;  // drops the longer demo samples
    options.on_bad_sample = OnBadSample::skip;
    options.num_workers = workers;
    return prepare_dataset(options, tokenizer);
  };
  const auto one = prepare_with(1);
  const PreparedDataset reference(one, &tokenizer);
  CHECK(reference.stats().skipped_bad == 1);
  CHECK(reference.stats().dropped_too_long > 0);
  CHECK(reference.size() > 60);
  for (const int workers : {0, 2, 4}) {
    const auto many = prepare_with(workers);
    INFO(workers << " workers");
    CHECK(many.filename() == one.filename());  // the thread count is not part of the key
    CHECK(read_file(many) == read_file(one));
  }

  // With on_bad_sample error, the error names the same (first) bad line.
  PrepareOptions strict;
  strict.inputs = {{dir / "chat.jsonl", DatasetFormat::chat_jsonl}};
  strict.seq_length = 96;
  for (const int workers : {1, 4}) {
    strict.cache_dir = dir / ("strict_" + std::to_string(workers));
    strict.num_workers = workers;
    REQUIRE_THROWS_WITH(prepare_dataset(strict, tokenizer), Catch::Contains("chat.jsonl:41"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("one tokenizer encodes from many threads at once as it does from one",
          "[data][workers]") {
  // The BPE piece cache and the regex match data are shared state: before they were guarded,
  // concurrent encodes could corrupt them.
  const Tokenizer& tokenizer = dyncp::data::test::qwen3_tokenizer();
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back("Sample " + std::to_string(i) + ": the quick brown fox 🦊 jumps over " +
                    std::string(static_cast<std::size_t>(i % 7) * 9, ' ') + "the lazy dog " +
                    std::to_string(i * 7919) + "\n\n\tnaïve café");
  std::vector<std::vector<std::int32_t>> serial;
  for (const auto& text : texts) serial.push_back(tokenizer.encode(text));
  std::vector<std::vector<std::int32_t>> parallel(texts.size() * 8);
  for_each_in_slices(parallel.size(), 8, [&](std::size_t index, int) {
    parallel[index] = tokenizer.encode(texts[index % texts.size()]);
  });
  for (std::size_t index = 0; index < parallel.size(); ++index)
    REQUIRE(parallel[index] == serial[index % texts.size()]);
}
