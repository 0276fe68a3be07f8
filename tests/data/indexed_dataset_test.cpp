#include "data/indexed_dataset.hpp"

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "test_paths.hpp"

using namespace dyncp::data;
using dyncp::data::test::read_file;
using dyncp::data::test::scratch_dir;
using dyncp::data::test::write_file;

TEST_CASE("indexed dataset round trips documents for every integer dtype", "[data][indexed]") {
  const auto dtype =
      GENERATE(std::uint8_t{1}, std::uint8_t{3}, std::uint8_t{4}, std::uint8_t{5}, std::uint8_t{8});
  const auto dir = scratch_dir("indexed_round_trip");
  const std::vector<std::vector<std::int32_t>> documents{
      {1, 2, 3}, {}, {200, 7}, {5, 5, 5, 5, 5, 5, 5}};
  write_indexed_dataset(dir / "docs", documents, dtype);
  const IndexedDataset dataset(dir / "docs");
  REQUIRE(dataset.num_documents() == 4);
  for (std::int64_t k = 0; k < 4; ++k) {
    std::vector<std::int32_t> tokens;
    dataset.read_document(k, tokens);
    CHECK(tokens == documents[static_cast<std::size_t>(k)]);
    CHECK(dataset.document_length(k) ==
          static_cast<std::int64_t>(documents[static_cast<std::size_t>(k)].size()));
  }
}

TEST_CASE("truncated or foreign .idx/.bin files are data errors naming the file",
          "[data][indexed]") {
  const auto dir = scratch_dir("indexed_bad");
  write_indexed_dataset(dir / "docs", {{1, 2, 3}, {4, 5}});
  const std::string index = read_file(dir / "docs.idx");
  const std::string bin = read_file(dir / "docs.bin");

  write_file(dir / "docs.idx", index.substr(0, index.size() - 4));
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"),
                      Catch::Contains("docs.idx") && Catch::Contains("truncated index"));

  write_file(dir / "docs.idx", index);
  write_file(dir / "docs.bin", bin.substr(0, bin.size() - 1));
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"),
                      Catch::Contains("docs.bin") && Catch::Contains("truncated data"));

  write_file(dir / "docs.bin", bin);
  std::string bad_magic = index;
  bad_magic[0] = 'X';
  write_file(dir / "docs.idx", bad_magic);
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"), Catch::Contains("magic"));

  std::string bad_version = index;
  bad_version[9] = 2;
  write_file(dir / "docs.idx", bad_version);
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"), Catch::Contains("version 2"));

  std::string float_dtype = index;
  float_dtype[17] = 7;
  write_file(dir / "docs.idx", float_dtype);
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"), Catch::Contains("dtype code 7"));

  REQUIRE_THROWS_WITH(IndexedDataset(dir / "missing"), Catch::Contains("missing.idx"));
}

TEST_CASE("a failed write of an indexed dataset leaves no index and no partial file",
          "[data][indexed]") {
  const auto dir = scratch_dir("indexed_enospc");
  // 0: the .bin fails at once; 40: the .bin (24 bytes) is written, the .idx fails midway.
  const char* limit = GENERATE("0", "40");
  ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", limit, 1);
  REQUIRE_THROWS_WITH(write_indexed_dataset(dir / "docs", {{1, 2, 3}, {4, 5, 6}}),
                      Catch::Contains("No space left on device") && Catch::Contains("docs."));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  CHECK_FALSE(std::filesystem::exists(dir / "docs.idx"));
  CHECK_FALSE(std::filesystem::exists(dir / "docs.idx.partial"));
  CHECK_FALSE(std::filesystem::exists(dir / "docs.bin.partial"));
  // Without its index the data cannot be opened (the index is written last).
  REQUIRE_THROWS_WITH(IndexedDataset(dir / "docs"), Catch::Contains("docs.idx"));
  std::filesystem::remove(dir / "docs.bin");
}
