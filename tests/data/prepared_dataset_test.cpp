#include "data/prepared_dataset.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.hpp"
#include "data/byte_level.hpp"
#include "data/chat_json.hpp"
#include "data/chat_template.hpp"
#include "data/indexed_dataset.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::demo_tokenizer;
using dyncp::data::test::read_file;
using dyncp::data::test::scratch_dir;
using dyncp::data::test::write_file;

namespace {

const std::string good_chat_a =
    R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"}]})";
const std::string good_chat_b =
    R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})";
std::string repeated(const std::string& word, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += word;
  return text;
}
const std::string long_chat = R"({"messages": [{"role": "user", "content": ")" +
                              repeated(" hello", 100) +
                              R"("}, {"role": "assistant", "content": "ok"}]})";

PrepareOptions chat_options(const std::filesystem::path& dir,
                            const std::string& file = "chat.jsonl") {
  PrepareOptions options;
  options.inputs = {{dir / file, DatasetFormat::chat_jsonl}};
  options.cache_dir = dir / "cache";
  options.seq_length = 64;
  return options;
}

// A byte-only BPE tokenizer (no merges) with the Qwen special tokens: a second, different
// tokenizer.
Tokenizer tiny_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  const ByteLevelAlphabet alphabet;
  for (int byte = 0; byte < 256; ++byte)
    vocab[alphabet.symbol_for_byte(static_cast<unsigned char>(byte))] = byte;
  nlohmann::json added = nlohmann::json::array();
  int id = 256;
  for (const char* content : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", content}, {"special", true}});
  }
  const nlohmann::json root = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", R"(\s+|\S+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return Tokenizer::from_json(root.dump(), "", "tiny");
}

}  // namespace

TEST_CASE("prepared chat cache holds exactly the tokenized conversations", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_chat");
  write_file(dir / "chat.jsonl", good_chat_a + "\n\n" + good_chat_b + "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  const auto path = prepare_dataset(chat_options(dir), tokenizer);
  const PreparedDataset dataset(path, &tokenizer);
  REQUIRE(dataset.size() == 2);
  std::uint64_t total_loss = 0;
  for (std::int64_t i = 0; i < 2; ++i) {
    const TokenizedChat expected =
        tokenize_chat(tokenizer, ChatTemplate::from_tokenizer(tokenizer, "x"),
                      parse_chat_sample(i == 0 ? good_chat_a : good_chat_b, "x"), {}, "x");
    CHECK(std::vector<std::int32_t>(dataset.tokens(i).begin(), dataset.tokens(i).end()) ==
          expected.tokens);
    CHECK(std::vector<std::uint8_t>(dataset.target_mask(i).begin(), dataset.target_mask(i).end()) ==
          expected.loss_mask);
    CHECK(dataset.length(i) == static_cast<std::int64_t>(expected.tokens.size()));
    CHECK(dataset.loss_tokens(i) == count_loss_tokens(expected.loss_mask));
    total_loss += static_cast<std::uint64_t>(dataset.loss_tokens(i));
    const Sample sample = dataset.sample(i, 16, tokenizer.pad_token_id());
    CHECK(sample.padded_len % 16 == 0);
    CHECK(sample.tokens.back() == tokenizer.pad_token_id());
  }
  CHECK(dataset.stats().records_read == 2);
  CHECK(dataset.stats().total_loss_tokens == total_loss);
  CHECK(dataset.stats().total_tokens ==
        static_cast<std::uint64_t>(dataset.length(0) + dataset.length(1)));
}

TEST_CASE("the cache is reused for the same inputs and re-keyed when anything changes",
          "[data][prepare]") {
  const auto dir = scratch_dir("prepare_key");
  write_file(dir / "chat.jsonl", good_chat_a + "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  PrepareOptions options = chat_options(dir);
  const auto first = prepare_dataset(options, tokenizer);
  const auto written_at = std::filesystem::last_write_time(first);
  CHECK(prepare_dataset(options, tokenizer) == first);
  CHECK(std::filesystem::last_write_time(first) == written_at);
  options.seq_length = 65;
  CHECK(prepared_cache_path(options, tokenizer) != first);
  options.seq_length = 64;
  write_file(dir / "chat.jsonl", good_chat_b + "\n");
  CHECK(prepared_cache_path(options, tokenizer) != first);
}

TEST_CASE("bad lines stop preparation with file:line, or are skipped and counted",
          "[data][prepare]") {
  const auto dir = scratch_dir("prepare_bad");
  write_file(dir / "chat.jsonl", good_chat_a + "\n{\"messages\": [}\n" + good_chat_b + "\n" +
                                     R"({"messages": [{"role": "user", "content": "no answer"}]})" +
                                     "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  PrepareOptions options = chat_options(dir);
  REQUIRE_THROWS_WITH(prepare_dataset(options, tokenizer), Catch::Contains("chat.jsonl:2") &&
                                                               Catch::Contains("invalid JSON") &&
                                                               Catch::Contains("on_bad_sample"));
  options.on_bad_sample = OnBadSample::skip;
  const PreparedDataset dataset(prepare_dataset(options, tokenizer));
  CHECK(dataset.size() == 2);
  CHECK(dataset.stats().skipped_bad == 2);
  CHECK(dataset.stats().records_read == 4);
}

TEST_CASE("over-long samples are dropped, truncated or rejected as configured", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_long");
  write_file(dir / "chat.jsonl", good_chat_a + "\n" + long_chat + "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  PrepareOptions options = chat_options(dir);
  options.truncation = Truncation::drop;
  const PreparedDataset dropped(prepare_dataset(options, tokenizer));
  CHECK(dropped.size() == 1);
  CHECK(dropped.stats().dropped_too_long == 1);

  options.truncation = Truncation::error;
  REQUIRE_THROWS_WITH(prepare_dataset(options, tokenizer),
                      Catch::Contains("chat.jsonl:2") && Catch::Contains("seq_length 64"));

  // Truncating the long sample cuts off its assistant turn: it then has no loss and is dropped.
  options.truncation = Truncation::truncate;
  const PreparedDataset truncated(prepare_dataset(options, tokenizer));
  CHECK(truncated.stats().truncated == 1);
  CHECK(truncated.stats().dropped_no_loss == 1);
  CHECK(truncated.size() == 1);
}

TEST_CASE("token-id JSONL: loss masks, samples without loss, bad ids", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_tokens");
  write_file(dir / "tokens.jsonl",
             "{\"input_ids\": [1, 2, 3, 4]}\n"
             "{\"input_ids\": [5, 6, 7], \"loss_mask\": [0, 0, 1]}\n"
             "{\"input_ids\": [8, 9], \"loss_mask\": [1, 0]}\n"
             "{\"input_ids\": [999999999]}\n"
             "{\"ids\": [1]}\n");
  PrepareOptions options;
  options.inputs = {{dir / "tokens.jsonl", DatasetFormat::tokens_jsonl}};
  options.cache_dir = dir / "cache";
  options.seq_length = 16;
  const Tokenizer& tokenizer = demo_tokenizer();
  REQUIRE_THROWS_WITH(prepare_dataset(options, tokenizer),
                      Catch::Contains("tokens.jsonl:4") && Catch::Contains("input_ids[0]"));
  options.on_bad_sample = OnBadSample::skip;
  const PreparedDataset dataset(prepare_dataset(options, tokenizer));
  REQUIRE(dataset.size() == 2);
  CHECK(dataset.loss_tokens(0) == 3);
  CHECK(dataset.loss_tokens(1) == 1);
  CHECK(dataset.stats().dropped_no_loss == 1);
  CHECK(dataset.stats().skipped_bad == 2);
}

TEST_CASE("indexed datasets prepare with loss on every token", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_indexed");
  write_indexed_dataset(dir / "docs", {{1, 2, 3}, {4, 5, 6, 7}, {8}});
  PrepareOptions options;
  options.inputs = {{dir / "docs", DatasetFormat::indexed}};
  options.cache_dir = dir / "cache";
  options.seq_length = 16;
  const PreparedDataset dataset(prepare_dataset(options, demo_tokenizer()));
  REQUIRE(dataset.size() == 2);  // the one-token document has nothing to predict
  CHECK(dataset.loss_tokens(1) == 3);
  CHECK(dataset.stats().dropped_no_loss == 1);
}

TEST_CASE("a cache from another tokenizer or a truncated cache is refused", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_foreign");
  write_file(dir / "chat.jsonl", good_chat_a + "\n");
  const auto path = prepare_dataset(chat_options(dir), demo_tokenizer());
  const Tokenizer other = tiny_tokenizer();
  REQUIRE_THROWS_WITH(PreparedDataset(path, &other), Catch::Contains("another tokenizer"));
  const std::string bytes = read_file(path);
  write_file(dir / "short.bin", bytes.substr(0, bytes.size() - 3));
  REQUIRE_THROWS_WITH(PreparedDataset(dir / "short.bin"), Catch::Contains("truncated"));
  write_file(dir / "foreign.bin", std::string(200, 'z'));
  REQUIRE_THROWS_WITH(PreparedDataset(dir / "foreign.bin"), Catch::Contains("bad magic"));
}

TEST_CASE("chat data needs a chat template", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_template");
  write_file(dir / "chat.jsonl", good_chat_a + "\n");
  REQUIRE_THROWS_WITH(prepare_dataset(chat_options(dir), tiny_tokenizer()),
                      Catch::Contains("no chat template"));
}

TEST_CASE("a second preparer waits on the lock and then reuses the cache", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_lock");
  write_file(dir / "chat.jsonl", good_chat_a + "\n");
  const PrepareOptions options = chat_options(dir);
  std::filesystem::create_directories(options.cache_dir);
  const Tokenizer& tokenizer = demo_tokenizer();
  const auto path = prepared_cache_path(options, tokenizer);
  std::future<std::filesystem::path> waiter;
  {
    const FileLock held(path.string() + ".lock");
    waiter = std::async(std::launch::async, [&] { return prepare_dataset(options, tokenizer); });
    CHECK(waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    CHECK_FALSE(std::filesystem::exists(path));
  }
  CHECK(waiter.get() == path);
  CHECK(PreparedDataset(path).size() == 1);
}

TEST_CASE("chat template kwargs change the prepared samples and the cache key", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_kwargs");
  write_file(dir / "chat.jsonl", good_chat_a + "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  PrepareOptions plain = chat_options(dir);
  PrepareOptions no_thinking = chat_options(dir);
  no_thinking.inputs[0].chat.template_kwargs_json = R"({"enable_thinking": false})";
  CHECK(prepared_cache_path(plain, tokenizer) != prepared_cache_path(no_thinking, tokenizer));
  const PreparedDataset with_think(prepare_dataset(plain, tokenizer), &tokenizer);
  const PreparedDataset without_think(prepare_dataset(no_thinking, tokenizer), &tokenizer);
  // With thinking off the last turn's empty <think></think> block is prompt, not target.
  CHECK(without_think.loss_tokens(0) < with_think.loss_tokens(0));
  no_thinking.inputs[0].chat.template_kwargs_json = "[1]";
  CHECK_THROWS_WITH(prepare_dataset(no_thinking, tokenizer), Catch::Contains("JSON object"));
}

TEST_CASE("the committed demo sample set prepares with its own tokenizer",
          "[data][prepare][demo]") {
  const auto demo = dyncp::data::test::fixture_path("demo");
  const Tokenizer tokenizer = Tokenizer::from_directory(demo / "tokenizer");
  // The demo tokenizer carries Qwen3's template verbatim.
  REQUIRE(tokenizer.chat_template() ==
          read_file(dyncp::data::test::fixture_path("chat_templates") / "qwen3.jinja"));
  PrepareOptions options;
  options.inputs = {{demo / "train.jsonl", DatasetFormat::chat_jsonl}};
  options.cache_dir = scratch_dir("prepare_demo");
  options.seq_length = 8192;
  const PreparedDataset dataset(prepare_dataset(options, tokenizer), &tokenizer);
  CHECK(dataset.size() == 40);
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    CHECK(dataset.loss_tokens(i) > 0);
    for (const std::int32_t id : dataset.tokens(i)) CHECK(id < 512);
  }
}

TEST_CASE("max_records prepares only a prefix, in its own cache", "[data][prepare]") {
  const auto dir = scratch_dir("prepare_prefix");
  write_file(dir / "chat.jsonl", good_chat_a + "\n" + good_chat_b + "\n" + good_chat_a + "\n");
  PrepareOptions options = chat_options(dir);
  const auto full = prepare_dataset(options, demo_tokenizer());
  options.max_records = 2;
  const auto prefix = prepare_dataset(options, demo_tokenizer());
  CHECK(prefix != full);
  CHECK(PreparedDataset(full).size() == 3);
  CHECK(PreparedDataset(prefix).size() == 2);
  CHECK(PreparedDataset(prefix).stats().records_read == 2);
}

namespace {

// Files left in `folder` (the cache and any temporary beside it).
std::vector<std::string> files_in(const std::filesystem::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().extension() != ".lock") names.push_back(entry.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("a full disk while writing the cache is an error and leaves no cache behind",
          "[data][prepare]") {
  // Before, the cache went through an unchecked std::ofstream: a failed close published a
  // truncated file under the final name, and the next run trusted it.
  const auto dir = scratch_dir("prepare_enospc");
  write_file(dir / "chat.jsonl", good_chat_a + "\n" + good_chat_b + "\n");
  const Tokenizer& tokenizer = demo_tokenizer();
  const PrepareOptions options = chat_options(dir);
  // 0: the header write fails; 200: the header is written, the sample arrays are not.
  const char* limit = GENERATE("0", "200");
  ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", limit, 1);
  REQUIRE_THROWS_WITH(prepare_dataset(options, tokenizer),
                      Catch::Contains("No space left on device") && Catch::Contains("prepared-"));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  CHECK(files_in(options.cache_dir).empty());
  // With room again the cache is prepared from scratch and complete.
  const PreparedDataset dataset(prepare_dataset(options, tokenizer), &tokenizer);
  CHECK(dataset.size() == 2);
  CHECK(files_in(options.cache_dir).size() == 1);
}
