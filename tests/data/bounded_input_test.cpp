// Damaged and hostile data files end in a data error naming the file and line (or document),
// never a crash, a hang or a silently changed value.

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "data/chat_json.hpp"
#include "data/dataset_source.hpp"
#include "data/indexed_dataset.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::read_file;
using dyncp::data::test::scratch_dir;
using dyncp::data::test::write_file;

TEST_CASE("deeply nested JSON lines are data errors naming the line, not a stack overflow",
          "[data][bounded]") {
  const std::string deep =
      "{\"messages\": " + std::string(20000, '[') + std::string(20000, ']') + "}";
  REQUIRE_THROWS_WITH(parse_chat_sample(deep, "train.jsonl:7"),
                      Catch::Contains("train.jsonl:7") && Catch::Contains("nested deeper"));
  REQUIRE_THROWS_WITH(parse_token_record(deep, "tokens.jsonl:3", 512),
                      Catch::Contains("tokens.jsonl:3") && Catch::Contains("nested deeper"));
  // Brackets inside strings do not count.
  const std::string text = std::string(200, '[');
  const auto sample = parse_chat_sample(R"({"messages": [{"role": "user", "content": ")" + text +
                                            R"("}, {"role": "assistant", "content": "ok"}]})",
                                        "ok.jsonl:1");
  REQUIRE(sample.messages.is_list());
  REQUIRE(sample.messages.items().size() == 2);
  REQUIRE(sample.messages.items().front().dict_ptr() != nullptr);
  const auto* content = sample.messages.items().front().dict_ptr()->find("content");
  REQUIRE(content != nullptr);
  CHECK(content->text() == text);
}

TEST_CASE("a JSON line with a NUL byte and junk after the object is refused", "[data][bounded]") {
  const std::string line = std::string(R"({"input_ids": [1, 2, 3]})") + '\0' + "junk";
  REQUIRE_THROWS_WITH(parse_token_record(line, "tokens.jsonl:2", 512),
                      Catch::Contains("tokens.jsonl:2") && Catch::Contains("NUL byte"));
  const std::string chat =
      std::string(R"({"messages": [{"role": "user", "content": "hi"}]})") + '\0' + "{";
  REQUIRE_THROWS_WITH(parse_chat_sample(chat, "chat.jsonl:9"), Catch::Contains("NUL byte"));
}

TEST_CASE("a dataset path that is a FIFO or a device is refused without opening it",
          "[data][bounded]") {
  const auto dir = scratch_dir("bounded_fifo");
  const auto fifo = dir / "train.jsonl";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto no_lines = [](std::string_view, std::int64_t) {};
  REQUIRE_THROWS_WITH(for_each_jsonl_line(fifo, no_lines),
                      Catch::Contains("train.jsonl") && Catch::Contains("a FIFO"));
  REQUIRE_THROWS_WITH(for_each_jsonl_line("/dev/zero", no_lines), Catch::Contains("a device"));
  const auto index_fifo = dir / "docs.idx";
  std::filesystem::remove(index_fifo);
  REQUIRE(::mkfifo(index_fifo.c_str(), 0600) == 0);
  write_file(dir / "docs.bin", "");
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"),
                      Catch::Contains("docs.idx") && Catch::Contains("a FIFO"));
}

TEST_CASE("an indexed dataset pointer whose end overflows is a data error, not a crash",
          "[data][bounded][indexed]") {
  const auto dir = scratch_dir("bounded_pointer");
  write_indexed_dataset(dir / "docs", {{1, 2, 3}, {4, 5}});
  std::string index = read_file(dir / "docs.idx");
  // Header (34) + 2 lengths (8): the second pointer sits at 34 + 8 + 8.
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() - 2;
  std::memcpy(index.data() + 34 + 8 + 8, &huge, sizeof huge);
  write_file(dir / "docs.idx", index);
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"),
                      Catch::Contains("docs.bin") && Catch::Contains("sequence 1"));
}

TEST_CASE("int64 token ids beyond int32 are refused, not truncated", "[data][bounded][indexed]") {
  const auto dir = scratch_dir("bounded_wide_ids");
  write_indexed_dataset(dir / "docs", {{1, 2, 3}}, /*dtype_code=*/5);
  std::string bin = read_file(dir / "docs.bin");
  const std::int64_t wide = 4294967301;  // 2^32 + 5: truncates to 5, a valid id
  std::memcpy(bin.data() + 8, &wide, sizeof wide);
  write_file(dir / "docs.bin", bin);
  const IndexedDataset dataset(dir / "docs");
  std::vector<std::int32_t> tokens;
  REQUIRE_THROWS_WITH(dataset.read_document(0, tokens),
                      Catch::Contains("docs.bin#0") && Catch::Contains("4294967301"));
}
