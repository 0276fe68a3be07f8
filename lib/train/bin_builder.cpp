#include "train/bin_builder.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::train {

using core::DType;
using core::Tensor;

const model::PackedBin& BinBuilder::build(const packing::PackedSeqParams& params,
                                          std::span<const data::Sample> samples) {
  const auto sequences = static_cast<std::int64_t>(params.sample_ids.size());
  DYNCP_CHECK(static_cast<std::int64_t>(samples.size()) == sequences, "one sample per sequence");
  token_ids_.clear();
  labels_.clear();
  positions_.clear();
  loss_mask_.clear();
  is_real_.clear();
  cu_seqlens_.assign(static_cast<std::size_t>(sequences + 1), 0);
  sequence_lengths_.resize(static_cast<std::size_t>(sequences));
  for (std::int64_t s = 0; s < sequences; ++s)
    sequence_lengths_[static_cast<std::size_t>(s)] =
        static_cast<std::int32_t>(samples[static_cast<std::size_t>(s)].original_len);
  real_tokens_ = 0;

  for (const packing::TokenRange& range : params.local_ranges) {
    const auto& sample = samples[static_cast<std::size_t>(range.sequence)];
    const std::int64_t sequence_start =
        params.cu_seqlens_padded[static_cast<std::size_t>(range.sequence)];
    const std::int64_t padded =
        params.cu_seqlens_padded[static_cast<std::size_t>(range.sequence) + 1] - sequence_start;
    if (sample.padded_len != padded) {
      core::throw_data_error("sample " + std::to_string(sample.sample_id),
                             "padded length " + std::to_string(sample.padded_len) +
                                 " differs from the schedule's " + std::to_string(padded));
    }
    for (std::int64_t row = range.begin; row < range.end; ++row) {
      const auto position = static_cast<std::size_t>(row - sequence_start);
      token_ids_.push_back(sample.tokens[position]);
      labels_.push_back(sample.labels[position]);
      loss_mask_.push_back(sample.loss_mask[position]);
      positions_.push_back(static_cast<std::int32_t>(position));
      const bool real = static_cast<std::int64_t>(position) < sample.original_len;
      is_real_.push_back(real ? 1 : 0);
      real_tokens_ += real ? 1 : 0;
    }
    cu_seqlens_[static_cast<std::size_t>(range.sequence) + 1] +=
        static_cast<std::int32_t>(range.end - range.begin);
  }
  for (std::int64_t s = 0; s < sequences; ++s) {
    cu_seqlens_[static_cast<std::size_t>(s) + 1] += cu_seqlens_[static_cast<std::size_t>(s)];
  }

  const auto rows = static_cast<std::int64_t>(token_ids_.size());
  bin_.token_ids = Tensor::view_of(token_ids_.data(), {rows}, DType::i32);
  bin_.labels = Tensor::view_of(labels_.data(), {rows}, DType::i32);
  bin_.positions = Tensor::view_of(positions_.data(), {rows}, DType::i32);
  bin_.cu_seqlens = Tensor::view_of(cu_seqlens_.data(), {sequences + 1}, DType::i32);
  bin_.sequence_lengths = Tensor::view_of(sequence_lengths_.data(), {sequences}, DType::i32);
  bin_.loss_mask = Tensor::view_of(loss_mask_.data(), {rows}, DType::u8);
  bin_.token_is_real = Tensor::view_of(is_real_.data(), {rows}, DType::u8);
  return bin_;
}

}  // namespace dyncp::train
