#pragma once
// Whole sequences of token ids packed into one bin (no context parallelism): what dyncp-check
// and the tests run. Labels are the next token inside each sequence; the last token of every
// sequence has no label, so a sequence of n tokens contributes n − 1 loss tokens.

#include <cstdint>
#include <string>
#include <vector>

#include "model/qwen3_moe_model.hpp"

namespace dyncp::model {

using TokenSequences = std::vector<std::vector<std::int32_t>>;

// A bin owning its tensors.
struct OwnedPackedBin {
  PackedBin bin;
  std::vector<std::int64_t> sequence_offsets;  // S + 1 row offsets (= cu_seqlens)
};

OwnedPackedBin pack_sequences(const TokenSequences& sequences);

// Reads {"sequences": [[ids], ...]}; data errors name the file and the sequence index.
TokenSequences read_batch_json(const std::string& path);

// Every id must be in [0, vocab_size) and every sequence non-empty; a data error names the
// sequence and position otherwise.
void check_token_sequences(const TokenSequences& sequences, std::int64_t vocab_size,
                           const std::string& where);

}  // namespace dyncp::model
