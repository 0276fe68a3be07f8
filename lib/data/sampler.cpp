#include "data/sampler.hpp"

#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace dyncp::data {

SamplerType parse_sampler_type(std::string_view name, const std::string& key_path) {
  if (name == "single") return SamplerType::single;
  if (name == "cyclic") return SamplerType::cyclic;
  core::throw_config_error(key_path, std::string(name) + ": expected one of [single, cyclic]");
}

SamplerPosition position_from_consumed(std::int64_t consumed_samples, std::int64_t num_samples) {
  DYNCP_CHECK(num_samples > 0, "sampler over an empty dataset");
  return {consumed_samples / num_samples, consumed_samples % num_samples, consumed_samples};
}

Sampler::Sampler(const SamplerOptions& options, std::int64_t num_samples, SamplerPosition start)
    : options_(options), num_samples_(num_samples), position_(start) {
  if (num_samples < 1) {
    core::throw_config_error("dataset",
                             "the dataset has no usable samples (all filtered out or empty input)");
  }
  if (options.global_batch_size < 1) {
    core::throw_config_error("train.global_batch_size",
                             std::to_string(options.global_batch_size) + ": must be >= 1");
  }
  if (start.index_in_epoch < 0 || start.index_in_epoch >= num_samples || start.epoch < 0) {
    core::throw_config_error(
        "checkpoint", "sampler position (epoch " + std::to_string(start.epoch) + ", index " +
                          std::to_string(start.index_in_epoch) + ") does not fit a dataset of " +
                          std::to_string(num_samples) + " samples");
  }
}

std::int64_t Sampler::sample_at(std::int64_t epoch, std::int64_t index_in_epoch) {
  if (options_.type == SamplerType::single) return index_in_epoch;
  if (permutation_epoch_ != epoch) {
    // Fisher-Yates with a stream keyed by the epoch: any rank, any resume point, same order.
    permutation_.resize(static_cast<std::size_t>(num_samples_));
    std::iota(permutation_.begin(), permutation_.end(), std::int64_t{0});
    core::Rng rng(options_.seed, core::RngPurpose::sampler_shuffle,
                  static_cast<std::uint64_t>(epoch));
    for (std::int64_t i = num_samples_ - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
      std::swap(permutation_[static_cast<std::size_t>(i)],
                permutation_[static_cast<std::size_t>(j)]);
    }
    permutation_epoch_ = epoch;
  }
  return permutation_[static_cast<std::size_t>(index_in_epoch)];
}

std::vector<std::int64_t> Sampler::next_global_batch() {
  std::vector<std::int64_t> batch;
  batch.reserve(static_cast<std::size_t>(options_.global_batch_size));
  for (std::int64_t k = 0; k < options_.global_batch_size; ++k) {
    batch.push_back(sample_at(position_.epoch, position_.index_in_epoch));
    ++position_.consumed_samples;
    if (++position_.index_in_epoch == num_samples_) {
      position_.index_in_epoch = 0;
      ++position_.epoch;
    }
  }
  return batch;
}

}  // namespace dyncp::data
