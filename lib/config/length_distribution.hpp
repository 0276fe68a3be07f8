#pragma once
// Synthetic sequence-length distributions, named by a short spec string, for the mock
// variable-length dataset, `dyncp-plan --distribution` and the scheduler benchmarks.
//
// API (small on purpose; the data layer depends on it):
//   LengthDistribution d = parse_length_distribution("lognormal:mean=1024,sigma=1.5");
//   std::int64_t n = sample_length(d, seed, step, index);           // one draw, random access
//   std::vector<std::int64_t> v = sample_lengths(d, count, seed, step);  // v[i] ==
//   sample_length(d, seed, step, i)
// Every draw is a pure function of (seed, step, index) through core::random_bits with purpose
// mock_lengths, so any rank can draw any sample's length without state or communication.
//
// Spec grammar: NAME or NAME:key=value,key=value,... (the recipe form NAME(key=value,...) and
// `fixed` for `equal` are accepted too). Lengths are real token counts (no
// alignment padding; pad them with packing/alignment.hpp). Unknown names or keys, malformed
// numbers and inconsistent bounds throw core::Error (config kind) naming `key_path`.
//
//   lognormal:mean=1024,sigma=1.5,min=128,max=8192
//       exp(mu + sigma * z), z ~ N(0,1), mu = ln(mean) - sigma^2 / 2 (so `mean` is the
//       arithmetic mean of the unclamped law), clamped to [min, max] and truncated to an
//       integer: the law of Megatron's mock varlen dataset.
//   llama3_long:short_mean=1024,short_sigma=0.8,long_mean=37000,long_sigma=0.3,
//               long_fraction=0.0011,min=16,max=131072
//       Llama-3-style long SFT mix: with probability long_fraction a lognormal of mean
//       long_mean, else one of mean short_mean, clamped to [min, max].
//   lmsys:mean=600,sigma=1.1,tail_fraction=0.008,tail_min=4096,max=300000,min=16
//       LMSys-Chat-like: lognormal body of mean `mean`; with probability tail_fraction a
//       log-uniform draw in [tail_min, max] (the long tail); clamped to [min, max].
//   trajectory:seq_length=32768,full_fraction=0.9,min=1024
//       Long multi-turn trajectories cut at seq_length: with probability full_fraction exactly
//       seq_length, else log-uniform in [min, seq_length].
//   uniform:min=128,max=8192          uniform integer in [min, max].
//   equal:length=4096                 every sample has this length.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dyncp::config {

enum class LengthDistributionKind { lognormal, llama3_long, lmsys, trajectory, uniform, equal };

struct LengthDistribution {
  LengthDistributionKind kind = LengthDistributionKind::lognormal;
  // Body (lognormal, llama3_long short part, lmsys body): mean and log-space sigma.
  double mean = 1024.0;
  double sigma = 1.5;
  // Second component (llama3_long long part): mean, sigma, probability.
  double long_mean = 37000.0;
  double long_sigma = 0.3;
  double long_fraction = 0.0011;
  // lmsys tail: probability and lower end of the log-uniform tail (upper end is max_length).
  double tail_fraction = 0.008;
  std::int64_t tail_min_length = 4096;
  // trajectory: the truncation length and the share of samples that hit it.
  std::int64_t seq_length = 32768;
  double full_fraction = 0.9;
  // Clamp bounds for every kind (equal: min == max == length).
  std::int64_t min_length = 128;
  std::int64_t max_length = 8192;

  // The canonical spec with every parameter spelled out (round-trips through the parser).
  std::string to_spec() const;
};

// Parse a spec; `key_path` names the option or config key in error messages.
LengthDistribution parse_length_distribution(std::string_view spec,
                                             const std::string& key_path = "distribution");

// One length, >= 1, a pure function of (distribution, seed, step, index).
std::int64_t sample_length(const LengthDistribution& distribution, std::uint64_t seed,
                           std::uint64_t step, std::uint64_t index);

// `count` lengths: element i equals sample_length(distribution, seed, step, i).
std::vector<std::int64_t> sample_lengths(const LengthDistribution& distribution, std::size_t count,
                                         std::uint64_t seed, std::uint64_t step);

// Names accepted by the parser, for help texts and "expected one of" messages.
std::vector<std::string> length_distribution_names();

}  // namespace dyncp::config
