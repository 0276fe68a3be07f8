// dataset.shuffle shuffles whatever the loader type (it did nothing unless cyclic before).
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "config/config_container.hpp"
#include "data/sampler.hpp"
#include "train/training_data.hpp"

using namespace dyncp;

namespace {

std::vector<std::int64_t> first_epoch(const config::ConfigContainer& config,
                                      data::SamplerPosition start = {}) {
  data::SamplerOptions options = train::sampler_options(config);
  options.global_batch_size = 8;
  data::Sampler sampler(options, 64, start);
  std::vector<std::int64_t> ids;
  for (int step = 0; step < 8 - start.index_in_epoch / 8; ++step) {
    for (const auto id : sampler.next_global_batch()) ids.push_back(id);
  }
  return ids;
}

}  // namespace

TEST_CASE("dataset.shuffle shuffles for every loader type, seeded and resumable",
          "[train][shuffle]") {
  std::vector<std::int64_t> in_order(64);
  std::iota(in_order.begin(), in_order.end(), 0);
  config::ConfigContainer config;
  for (const auto loader : {config::DataloaderType::single, config::DataloaderType::cyclic}) {
    config.dataset.dataloader_type = loader;
    config.dataset.shuffle = true;
    const auto shuffled = first_epoch(config);
    CHECK(shuffled != in_order);
    CHECK(std::is_permutation(shuffled.begin(), shuffled.end(), in_order.begin()));
    CHECK(first_epoch(config) == shuffled);  // seeded: the same order every time
    // Resumable: from the position after 3 batches, the rest of the same order.
    const auto resumed = first_epoch(config, {0, 24, 24});
    CHECK(std::equal(resumed.begin(), resumed.end(), shuffled.begin() + 24));
    config.rng.seed += 1;
    CHECK(first_epoch(config) != shuffled);
    config.rng.seed -= 1;
  }
  config.dataset.dataloader_type = config::DataloaderType::single;
  config.dataset.shuffle = false;
  CHECK(first_epoch(config) == in_order);
}

TEST_CASE("dataset.num_workers reaches the preparation as its thread count", "[train][workers]") {
  config::ConfigContainer config;
  CHECK(train::prepare_options(config).num_workers == 2);  // the Megatron-Bridge default
  config.dataset.num_workers = 7;
  CHECK(train::prepare_options(config).num_workers == 7);
}
