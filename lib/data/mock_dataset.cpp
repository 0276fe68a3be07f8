#include "data/mock_dataset.hpp"

#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace dyncp::data {

MockVarlenDataset::MockVarlenDataset(const MockVarlenOptions& options)
    : options_(options),
      distribution_(config::parse_length_distribution(options.distribution,
                                                      "dataset.mock_length_distribution")) {
  if (options.num_samples < 1) {
    core::throw_config_error("dataset.mock_num_samples",
                             std::to_string(options.num_samples) + ": must be >= 1");
  }
  if (options.vocab_size < 2) {
    core::throw_config_error("model.vocab_size",
                             std::to_string(options.vocab_size) + ": must be >= 2");
  }
}

std::int64_t MockVarlenDataset::length(std::int64_t index) const {
  if (index < 0 || index >= options_.num_samples) {
    core::throw_data_error("mock_varlen", "sample id " + std::to_string(index) + " out of range");
  }
  return config::sample_length(distribution_, options_.seed, 0, static_cast<std::uint64_t>(index));
}

Sample MockVarlenDataset::sample(std::int64_t index, std::int64_t alignment,
                                 std::int32_t pad_token_id) const {
  const std::int64_t count = length(index);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint64_t bits =
        core::random_bits(options_.seed, core::RngPurpose::mock_data,
                          static_cast<std::uint64_t>(index), static_cast<std::uint64_t>(i));
    tokens[static_cast<std::size_t>(i)] =
        static_cast<std::int32_t>(bits % static_cast<std::uint64_t>(options_.vocab_size));
  }
  const std::vector<std::uint8_t> target_mask(tokens.size(), 1);
  return make_sample(index, tokens, target_mask, alignment, pad_token_id);
}

}  // namespace dyncp::data
