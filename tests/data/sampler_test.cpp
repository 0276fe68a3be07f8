#include "data/sampler.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>

using namespace dyncp::data;

TEST_CASE("single sampler walks samples in order across epochs", "[data][sampler]") {
  Sampler sampler({SamplerType::single, 1, 4}, 6);
  CHECK(sampler.next_global_batch() == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(sampler.next_global_batch() == std::vector<std::int64_t>{4, 5, 0, 1});
  CHECK(sampler.position() == SamplerPosition{1, 2, 8});
}

TEST_CASE("cyclic sampler visits every sample once per epoch with a per-epoch permutation",
          "[data][sampler]") {
  const std::int64_t num_samples = 97;
  Sampler sampler({SamplerType::cyclic, 42, 97}, num_samples);
  auto epoch0 = sampler.next_global_batch();
  auto epoch1 = sampler.next_global_batch();
  CHECK(epoch0 != epoch1);
  std::vector<std::int64_t> identity(97);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(epoch0 != identity);
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  CHECK(epoch0 == identity);
  CHECK(epoch1 == identity);
}

TEST_CASE("every rank's sampler gives the same batches; the seed changes them", "[data][sampler]") {
  Sampler rank0({SamplerType::cyclic, 7, 16}, 50);
  Sampler rank1({SamplerType::cyclic, 7, 16}, 50);
  Sampler other_seed({SamplerType::cyclic, 8, 16}, 50);
  bool differs = false;
  for (int step = 0; step < 10; ++step) {
    const auto batch = rank0.next_global_batch();
    CHECK(batch == rank1.next_global_batch());
    differs |= batch != other_seed.next_global_batch();
  }
  CHECK(differs);
}

TEST_CASE("a resumed sampler continues exactly where the original was", "[data][sampler]") {
  const SamplerOptions options{SamplerType::cyclic, 11, 12};
  Sampler uninterrupted(options, 31);
  for (int step = 0; step < 5; ++step) uninterrupted.next_global_batch();
  const SamplerPosition saved = uninterrupted.position();
  CHECK(saved == position_from_consumed(60, 31));
  Sampler resumed(options, 31, saved);
  Sampler from_count(options, 31, position_from_consumed(saved.consumed_samples, 31));
  for (int step = 0; step < 8; ++step) {
    const auto expected = uninterrupted.next_global_batch();
    CHECK(resumed.next_global_batch() == expected);
    CHECK(from_count.next_global_batch() == expected);
  }
}

TEST_CASE("sampler rejects empty datasets and bad positions", "[data][sampler]") {
  REQUIRE_THROWS_WITH(Sampler({SamplerType::single, 1, 4}, 0),
                      Catch::Contains("no usable samples"));
  REQUIRE_THROWS_WITH(Sampler({SamplerType::single, 1, 0}, 5),
                      Catch::Contains("train.global_batch_size"));
  REQUIRE_THROWS_WITH(Sampler({SamplerType::single, 1, 2}, 5, SamplerPosition{0, 5, 5}),
                      Catch::Contains("does not fit"));
  REQUIRE_THROWS_WITH(parse_sampler_type("random", "dataset.dataloader_type"),
                      Catch::Contains("expected one of [single, cyclic]"));
}
