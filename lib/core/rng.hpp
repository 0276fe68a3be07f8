#pragma once
// Counter-based randomness: every draw is a pure function of (seed, purpose, step, index), so
// there is no hidden RNG state to save, restore or keep in sync across ranks. The mixing
// function is SplitMix64's finaliser, applied to a combination of the four inputs.

#include <cstdint>
#include <limits>

namespace dyncp::core {

// Purposes keep streams for different uses independent even with equal step/index.
enum class RngPurpose : std::uint64_t {
  weight_init = 1,
  sampler_shuffle = 2,
  mock_data = 3,
  mock_lengths = 4,
  test = 5,
  dropout = 6,
};

constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t random_bits(std::uint64_t seed, RngPurpose purpose, std::uint64_t step,
                                    std::uint64_t index) {
  std::uint64_t h = mix64(seed);
  h = mix64(h ^ static_cast<std::uint64_t>(purpose));
  h = mix64(h ^ step);
  return mix64(h ^ index);
}

// A small sequential generator for code that needs many draws from one stream.
class Rng {
 public:
  Rng(std::uint64_t seed, RngPurpose purpose, std::uint64_t step = 0)
      : base_(random_bits(seed, purpose, step, 0)) {}

  std::uint64_t next_u64() { return mix64(base_ + 0x632be59bd9b4e019ULL * ++counter_); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, bound) by rejection, so it is exactly unbiased.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                                std::numeric_limits<std::uint64_t>::max() % bound;
    std::uint64_t draw = next_u64();
    while (draw >= limit) draw = next_u64();
    return draw % bound;
  }
  // Standard normal by Box-Muller (the second value is dropped to keep draws stateless).
  double normal();

 private:
  std::uint64_t base_;
  std::uint64_t counter_ = 0;
};

}  // namespace dyncp::core
