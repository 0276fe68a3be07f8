#pragma once
// The sample contract between data, packing and train (docs/architecture.md §5).
//
// Stored datasets hold, per sample, its tokens and a target mask aligned with them:
// target_mask[i] = 1 when token i is something the model should learn to predict (assistant
// tokens for chat data). A Sample turns that into next-token training arrays of padded length L:
//   labels[i]    = tokens[i + 1] when i + 1 < n and target_mask[i + 1], else ignore_label
//   loss_mask[i] = labels[i] != ignore_label
//   tokens[n..L) = pad token, labels = ignore, loss_mask = 0
// So a sample of n tokens has at most n - 1 loss tokens (the first token is never a target).
//
// The padded length L is a property of the pair (sample, group), not of the stored sample:
// the scheduler decides the group a sample runs on, and the sample is materialised for it
// with that group's multiple (packing::AlignmentRule::multiple(c)). Datasets and the
// preparation cache hold real tokens only, independent of the layout.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packing/alignment.hpp"

namespace dyncp::data {

inline constexpr std::int32_t ignore_label = -100;

struct Sample {
  std::int64_t sample_id = 0;
  std::vector<std::int32_t> tokens;     // [padded_len]
  std::vector<std::int32_t> labels;     // [padded_len]
  std::vector<std::uint8_t> loss_mask;  // [padded_len]
  std::int64_t original_len = 0;        // n real tokens
  std::int64_t padded_len = 0;          // L = n rounded up to its group's multiple
};

// Padded length: packing::padded_length (the one rounding rule, packing/alignment.hpp).
using packing::padded_length;

// Loss tokens a sample with this target mask contributes: targets at positions 1..n-1.
std::int64_t count_loss_tokens(std::span<const std::uint8_t> target_mask);

Sample make_sample(std::int64_t sample_id, std::span<const std::int32_t> tokens,
                   std::span<const std::uint8_t> target_mask, std::int64_t alignment,
                   std::int32_t pad_token_id);

class SampleSource;

// Throws a data error naming the first sample whose padded length exceeds `capacity_tokens`
// (e.g. pool size x max_seqlen_per_dp_cp_rank, with `alignment` the largest group's multiple):
// such a sample can never be scheduled.
void require_samples_fit(const SampleSource& source, std::int64_t capacity_tokens,
                         std::int64_t alignment, const std::string& capacity_description);

// Anything that serves samples by index: a prepared dataset or the mock one.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual std::int64_t size() const = 0;
  // Real token count n of sample `index` (no padding).
  virtual std::int64_t length(std::int64_t index) const = 0;
  // The sample padded to a multiple of `alignment`: the multiple of the group it runs on.
  virtual Sample sample(std::int64_t index, std::int64_t alignment,
                        std::int32_t pad_token_id) const = 0;
};

}  // namespace dyncp::data
