#include "parallel/parameter_partition.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::parallel {

std::int64_t expert_index_of(const std::string& hf_name) {
  static const std::string marker = ".experts.";
  const auto at = hf_name.find(marker);
  if (at == std::string::npos) return -1;
  std::int64_t index = 0;
  std::size_t i = at + marker.size();
  if (i >= hf_name.size() || hf_name[i] < '0' || hf_name[i] > '9') return -1;
  for (; i < hf_name.size() && hf_name[i] >= '0' && hf_name[i] <= '9'; ++i)
    index = index * 10 + (hf_name[i] - '0');
  return index;
}

bool is_norm_weight(const std::string& hf_name) {
  return hf_name.find("norm.weight") != std::string::npos;
}

ParameterPartition partition_parameters(const model::Qwen3MoeParameters& parameters) {
  const auto* base = static_cast<const float*>(parameters.all_values().raw_data());
  std::vector<ParameterRange> pieces;
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    const std::int64_t expert = expert_index_of(tensor.name);
    DYNCP_CHECK(tensor.is_expert == (expert >= 0),
                "expert flag matches the tensor name " + tensor.name);
    const auto offset =
        static_cast<std::int64_t>(static_cast<const float*>(tensor.value.raw_data()) - base);
    const bool tied_copy =
        parameters.holds_tied_head_copy() && tensor.name == "model.embed_tokens.weight";
    pieces.push_back({offset, tensor.value.numel(), expert >= 0, !is_norm_weight(tensor.name),
                      tied_copy, tensor.split, tensor.tp_partial_grad});
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const ParameterRange& a, const ParameterRange& b) { return a.offset < b.offset; });

  ParameterPartition partition;
  for (const ParameterRange& piece : pieces) {
    if (!partition.ranges.empty()) {
      ParameterRange& last = partition.ranges.back();
      if (piece.offset == last.offset) continue;  // tied LM head: the same storage
      DYNCP_CHECK(piece.offset >= last.offset + last.count, "parameter views do not overlap");
      if (piece.offset == last.offset + last.count && piece.same_kind(last)) {
        last.count += piece.count;
        continue;
      }
    }
    partition.ranges.push_back(piece);
  }
  for (const ParameterRange& range : partition.ranges)
    (range.is_expert ? partition.expert_elements : partition.dense_elements) += range.count;
  return partition;
}

}  // namespace dyncp::parallel
