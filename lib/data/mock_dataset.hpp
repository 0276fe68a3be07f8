#pragma once
// `dataset.type: mock_varlen`: samples with lengths from a packing/length_distribution.hpp spec,
// random token ids and loss on every token. Every value is a pure function of (seed, index), so
// all ranks agree without communication and nothing is stored.

#include <cstdint>
#include <string>

#include "config/length_distribution.hpp"
#include "data/sample.hpp"

namespace dyncp::data {

struct MockVarlenOptions {
  std::string distribution = "lognormal:mean=1024,sigma=1.5,min=128,max=8192";
  std::int64_t num_samples = 100000;
  std::int32_t vocab_size = 512;
  std::uint64_t seed = 1234;
};

class MockVarlenDataset final : public SampleSource {
 public:
  // Throws a config error naming dataset.* keys for a bad spec, count or vocabulary size.
  explicit MockVarlenDataset(const MockVarlenOptions& options);

  std::int64_t size() const override { return options_.num_samples; }
  std::int64_t length(std::int64_t index) const override;
  Sample sample(std::int64_t index, std::int64_t alignment,
                std::int32_t pad_token_id) const override;

 private:
  MockVarlenOptions options_;
  config::LengthDistribution distribution_;
};

}  // namespace dyncp::data
