#pragma once
// Turns one rank's share of one microbatch (packing::PackedSeqParams) into the model's
// PackedBin: the rank's zigzag shard of every sequence of the bin, with each row's global
// position (RoPE, causality), its label and its loss mask. Sequences keep their bin order;
// a sequence's rows on this rank may come from two chunks (k and 2c-1-k), possibly merged.
//
//   local_ranges {[2,6) seq 0 pos 2}, {[9,11) seq 1 pos 1}   (the packed_seq_params example)
//   -> rows: seq 0 positions 2,3,4,5 | seq 1 positions 1,2;  cu_seqlens = [0, 4, 6]
//
// Buffers are reused from bin to bin (grow-only), so steady-state steps do not allocate here.

#include <cstdint>
#include <span>
#include <vector>

#include "data/sample.hpp"
#include "model/qwen3_moe_model.hpp"
#include "packing/packed_seq_params.hpp"

namespace dyncp::train {

class BinBuilder {
 public:
  // `samples[i]` is the sample of bin sequence i (params.sample_ids[i]), padded to the
  // sequence's padded length. The returned bin views this builder's buffers: valid until the
  // next build().
  const model::PackedBin& build(const packing::PackedSeqParams& params,
                                std::span<const data::Sample> samples);

  std::int64_t real_tokens() const { return real_tokens_; }  // local rows that are not padding

 private:
  std::vector<std::int32_t> token_ids_;
  std::vector<std::int32_t> labels_;
  std::vector<std::int32_t> positions_;
  std::vector<std::int32_t> cu_seqlens_;
  std::vector<std::int32_t> sequence_lengths_;  // real tokens of each whole sequence
  std::vector<std::uint8_t> loss_mask_;
  std::vector<std::uint8_t> is_real_;
  std::int64_t real_tokens_ = 0;
  model::PackedBin bin_;
};

}  // namespace dyncp::train
