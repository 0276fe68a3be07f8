#pragma once
// Global batches of sample ids, identical on every rank: a pure function of (options, number
// of samples, position), with no communication.
//   single  epoch e visits samples 0..N-1 in order
//   cyclic  epoch e visits a permutation of 0..N-1 drawn from (seed, sampler_shuffle, e)
// A batch that reaches the end of an epoch continues at the start of the next one. The position
// (epoch, index within the epoch) and the consumed-samples count are what a checkpoint stores;
// position_from_consumed recovers the position from the count alone.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dyncp::data {

enum class SamplerType { single, cyclic };
SamplerType parse_sampler_type(std::string_view name, const std::string& key_path);

struct SamplerOptions {
  SamplerType type = SamplerType::cyclic;
  std::uint64_t seed = 1234;
  std::int64_t global_batch_size = 1;
};

struct SamplerPosition {
  std::int64_t epoch = 0;
  std::int64_t index_in_epoch = 0;
  std::int64_t consumed_samples = 0;
  bool operator==(const SamplerPosition&) const = default;
};

SamplerPosition position_from_consumed(std::int64_t consumed_samples, std::int64_t num_samples);

class Sampler {
 public:
  // Throws a config error when num_samples < 1 or global_batch_size < 1.
  Sampler(const SamplerOptions& options, std::int64_t num_samples, SamplerPosition start = {});

  // The next global batch (global_batch_size ids) and advances the position.
  std::vector<std::int64_t> next_global_batch();
  const SamplerPosition& position() const { return position_; }

  // The sample id at `index_in_epoch` of `epoch` (the permutation is cached per epoch).
  std::int64_t sample_at(std::int64_t epoch, std::int64_t index_in_epoch);

 private:
  SamplerOptions options_;
  std::int64_t num_samples_;
  SamplerPosition position_;
  std::int64_t permutation_epoch_ = -1;
  std::vector<std::int64_t> permutation_;
};

}  // namespace dyncp::data
