#pragma once
// The length distribution of mock_varlen data, written as a spec string:
//   lognormal(min=64,max=8192,mean=1024,sigma=1.0)   lengths ~ exp(N(mu, sigma)) with mu chosen
//                                                    so the unclipped mean is `mean`, clipped
//                                                    to [min, max]
//   uniform(min=16,max=512)                          integers uniform in [min, max]
//   fixed(length=256)                                every sample the same length

#include <cstdint>
#include <string>

namespace dyncp::config {

struct LengthDistribution {
  enum class Kind { lognormal, uniform, fixed };
  Kind kind = Kind::fixed;
  std::int64_t min_length = 1;
  std::int64_t max_length = 1;
  double mean = 0.0;   // lognormal only
  double sigma = 0.0;  // lognormal only
};

// Throws a config error naming dataset.mock_length_distribution on a malformed spec.
LengthDistribution parse_length_distribution(const std::string& spec);

}  // namespace dyncp::config
