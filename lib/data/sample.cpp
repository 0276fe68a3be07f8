#include "data/sample.hpp"

#include "core/error.hpp"

namespace dyncp::data {

std::int64_t count_loss_tokens(std::span<const std::uint8_t> target_mask) {
  std::int64_t count = 0;
  for (std::size_t i = 1; i < target_mask.size(); ++i) count += target_mask[i] != 0;
  return count;
}

Sample make_sample(std::int64_t sample_id, std::span<const std::int32_t> tokens,
                   std::span<const std::uint8_t> target_mask, std::int64_t alignment,
                   std::int32_t pad_token_id) {
  DYNCP_CHECK(tokens.size() == target_mask.size(), "tokens and target mask differ in length");
  Sample sample;
  sample.sample_id = sample_id;
  sample.original_len = static_cast<std::int64_t>(tokens.size());
  sample.padded_len = padded_length(sample.original_len, alignment);
  const auto padded = static_cast<std::size_t>(sample.padded_len);
  sample.tokens.assign(padded, pad_token_id);
  sample.labels.assign(padded, ignore_label);
  sample.loss_mask.assign(padded, 0);
  for (std::size_t i = 0; i < tokens.size(); ++i) sample.tokens[i] = tokens[i];
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (target_mask[i + 1]) {
      sample.labels[i] = tokens[i + 1];
      sample.loss_mask[i] = 1;
    }
  }
  return sample;
}

void require_samples_fit(const SampleSource& source, std::int64_t capacity_tokens,
                         std::int64_t alignment, const std::string& capacity_description) {
  for (std::int64_t index = 0; index < source.size(); ++index) {
    const std::int64_t padded = padded_length(source.length(index), alignment);
    if (padded > capacity_tokens) {
      core::throw_data_error("sample " + std::to_string(index),
                             "padded length " + std::to_string(padded) + " exceeds " +
                                 capacity_description + " (" + std::to_string(capacity_tokens) +
                                 " tokens), so it can never be scheduled; lower dataset.seq_length "
                                 "or raise the capacity");
    }
  }
}

}  // namespace dyncp::data
