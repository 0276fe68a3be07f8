#include "model/packed_batch.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dyncp::model {

using core::DType;

OwnedPackedBin pack_sequences(const TokenSequences& sequences) {
  std::int64_t tokens = 0;
  for (const auto& sequence : sequences) tokens += static_cast<std::int64_t>(sequence.size());
  const auto sequence_count = static_cast<std::int64_t>(sequences.size());
  OwnedPackedBin owned;
  PackedBin& bin = owned.bin;
  bin.token_ids = Tensor::empty({tokens}, DType::i32);
  bin.labels = Tensor::empty({tokens}, DType::i32);
  bin.positions = Tensor::empty({tokens}, DType::i32);
  bin.cu_seqlens = Tensor::empty({sequence_count + 1}, DType::i32);
  std::int32_t* ids = bin.token_ids.data<std::int32_t>();
  std::int32_t* labels = bin.labels.data<std::int32_t>();
  std::int32_t* positions = bin.positions.data<std::int32_t>();
  std::int32_t* cu = bin.cu_seqlens.data<std::int32_t>();
  std::int64_t row = 0;
  cu[0] = 0;
  owned.sequence_offsets.push_back(0);
  for (std::int64_t s = 0; s < sequence_count; ++s) {
    const auto& sequence = sequences[static_cast<std::size_t>(s)];
    const auto length = static_cast<std::int64_t>(sequence.size());
    for (std::int64_t i = 0; i < length; ++i, ++row) {
      ids[row] = sequence[static_cast<std::size_t>(i)];
      labels[row] = i + 1 < length ? sequence[static_cast<std::size_t>(i + 1)] : -1;
      positions[row] = static_cast<std::int32_t>(i);
    }
    cu[s + 1] = static_cast<std::int32_t>(row);
    owned.sequence_offsets.push_back(row);
  }
  return owned;
}

TokenSequences read_batch_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) core::throw_data_error(path, "cannot open the batch file");
  const auto root = nlohmann::json::parse(in, nullptr, false);
  if (root.is_discarded()) core::throw_data_error(path, "invalid JSON");
  const auto it = root.is_object() ? root.find("sequences") : root.end();
  if (!root.is_object() || it == root.end() || !it->is_array())
    core::throw_data_error(path, "expected {\"sequences\": [[token ids], ...]}");
  TokenSequences sequences;
  for (std::size_t s = 0; s < it->size(); ++s) {
    const auto& entry = (*it)[s];
    const std::string where = path + ": sequences[" + std::to_string(s) + "]";
    if (!entry.is_array()) core::throw_data_error(where, "is not an array of token ids");
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < entry.size(); ++i) {
      const auto& id = entry[i];
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() > INT32_MAX)
        core::throw_data_error(where + "[" + std::to_string(i) + "]",
                               id.dump() + " is not a non-negative integer token id");
      ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
    sequences.push_back(std::move(ids));
  }
  if (sequences.empty()) core::throw_data_error(path, "'sequences' is empty");
  return sequences;
}

void check_token_sequences(const TokenSequences& sequences, std::int64_t vocab_size,
                           const std::string& where) {
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const std::string sequence_where = where + ": sequences[" + std::to_string(s) + "]";
    if (sequences[s].empty()) core::throw_data_error(sequence_where, "is empty");
    for (std::size_t i = 0; i < sequences[s].size(); ++i)
      if (sequences[s][i] < 0 || sequences[s][i] >= vocab_size)
        core::throw_data_error(sequence_where + "[" + std::to_string(i) + "]",
                               "token id " + std::to_string(sequences[s][i]) +
                                   " is outside the model's vocabulary [0, " +
                                   std::to_string(vocab_size) + ")");
  }
}

}  // namespace dyncp::model
