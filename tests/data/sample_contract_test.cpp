#include <algorithm>
#include <catch2/catch.hpp>

#include "data/mock_dataset.hpp"
#include "data/sample.hpp"

using namespace dyncp::data;

TEST_CASE("a sample's labels are the next target token and padding is ignored", "[data][sample]") {
  const std::vector<std::int32_t> tokens{10, 11, 12, 13, 14};
  const std::vector<std::uint8_t> targets{0, 0, 1, 1, 0};
  const Sample sample = make_sample(7, tokens, targets, 4, 99);
  CHECK(sample.sample_id == 7);
  CHECK(sample.original_len == 5);
  CHECK(sample.padded_len == 8);
  CHECK(sample.tokens == std::vector<std::int32_t>{10, 11, 12, 13, 14, 99, 99, 99});
  CHECK(sample.labels == std::vector<std::int32_t>{-100, 12, 13, -100, -100, -100, -100, -100});
  CHECK(sample.loss_mask == std::vector<std::uint8_t>{0, 1, 1, 0, 0, 0, 0, 0});
  CHECK(count_loss_tokens(targets) == 2);
}

TEST_CASE("padded length is the next multiple of the alignment", "[data][sample]") {
  const auto alignment = GENERATE(1, 2, 8, 16);
  for (std::int64_t length = 1; length < 40; ++length) {
    const std::int64_t padded = padded_length(length, alignment);
    CHECK(padded % alignment == 0);
    CHECK(padded >= length);
    CHECK(padded - length < alignment);
  }
}

TEST_CASE("mock varlen samples follow the distribution and are deterministic", "[data][mock]") {
  MockVarlenOptions options;
  options.distribution = "uniform:min=5,max=40";
  options.num_samples = 50;
  options.vocab_size = 512;
  options.seed = 3;
  const MockVarlenDataset first(options);
  const MockVarlenDataset second(options);
  for (std::int64_t i = 0; i < first.size(); ++i) {
    const std::int64_t length = first.length(i);
    CHECK(length >= 5);
    CHECK(length <= 40);
    const Sample sample = first.sample(i, 8, 0);
    CHECK(sample.original_len == length);
    CHECK(sample.padded_len % 8 == 0);
    CHECK(sample.tokens == second.sample(i, 8, 0).tokens);
    for (std::int64_t k = 0; k < length; ++k)
      CHECK(sample.tokens[static_cast<std::size_t>(k)] < 512);
    // Loss on every token: every position but the last real one has a label.
    for (std::int64_t k = 0; k + 1 < length; ++k)
      CHECK(sample.loss_mask[static_cast<std::size_t>(k)] == 1);
  }
  options.seed = 4;
  const MockVarlenDataset other_seed(options);
  bool any_difference = false;
  for (std::int64_t i = 0; i < first.size(); ++i)
    any_difference |= other_seed.length(i) != first.length(i);
  CHECK(any_difference);
}

TEST_CASE("mock varlen rejects a bad distribution spec naming the key", "[data][mock]") {
  MockVarlenOptions options;
  options.distribution = "zipf:alpha=2";
  REQUIRE_THROWS_WITH(MockVarlenDataset(options),
                      Catch::Contains("dataset.mock_length_distribution"));
}

TEST_CASE("a sample longer than the pool's capacity is reported with its id", "[data][sample]") {
  MockVarlenOptions options;
  options.distribution = "uniform:min=10,max=100";
  options.num_samples = 200;
  const MockVarlenDataset dataset(options);
  REQUIRE_NOTHROW(require_samples_fit(dataset, 128, 8, "pool x max_seqlen_per_dp_cp_rank"));
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) longest = std::max(longest, dataset.length(i));
  REQUIRE(longest > 60);
  REQUIRE_THROWS_WITH(require_samples_fit(dataset, 60, 4, "pool x max_seqlen_per_dp_cp_rank"),
                      Catch::Contains("sample ") && Catch::Contains("can never be scheduled"));
}
