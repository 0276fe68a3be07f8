#include "packing/alignment.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::packing {

std::int64_t alignment_multiple(const AlignmentLayout& layout) {
  auto require_positive = [](std::int64_t value, const char* key) {
    if (value < 1) core::throw_config_error(key, std::to_string(value) + ": must be >= 1");
  };
  require_positive(layout.data_parallel_size, "data_parallel_size");
  require_positive(layout.context_parallel_size, "context_parallel_size");
  require_positive(layout.tensor_parallel_size, "tensor_parallel_size");
  std::int64_t multiple = 1;
  if (layout.dynamic_context_parallel) {
    multiple = 2 * layout.data_parallel_size * layout.context_parallel_size;
  } else if (layout.context_parallel_size > 1) {
    multiple = 2 * layout.context_parallel_size;
  }
  if (layout.sequence_parallel && layout.tensor_parallel_size > 1) {
    multiple *= layout.tensor_parallel_size;
  }
  return multiple;
}

std::int64_t padded_length(std::int64_t length, std::int64_t multiple) {
  if (multiple < 1) {
    core::throw_config_error("alignment multiple", std::to_string(multiple) + ": must be >= 1");
  }
  if (length < 1) {
    core::throw_data_error("sequence length", std::to_string(length) + ": must be >= 1");
  }
  return (length + multiple - 1) / multiple * multiple;
}

AlignmentRule alignment_rule(const AlignmentLayout& layout, config::PackingAlignment mode,
                             std::int64_t pool_multiple_override) {
  AlignmentRule rule;
  // A static layout's groups all have cp ranks: per-group padding is the pool rule there.
  rule.mode = layout.dynamic_context_parallel ? mode : config::PackingAlignment::pool;
  rule.pool_multiple =
      pool_multiple_override > 0 ? pool_multiple_override : alignment_multiple(layout);
  rule.sequence_parallel_factor =
      layout.sequence_parallel && layout.tensor_parallel_size > 1 ? layout.tensor_parallel_size : 1;
  return rule;
}

AlignmentRule alignment_rule(const config::ConfigContainer& config) {
  const config::ParallelLayout& layout = config.layout;
  return alignment_rule({layout.data_parallel_size, layout.context_parallel_size,
                         config.model.dynamic_context_parallel,
                         config.model.tensor_model_parallel_size, config.model.sequence_parallel},
                        config.packing.alignment, layout.alignment_multiple);
}

SequenceLength align_sequence(std::int64_t length, std::int64_t multiple,
                              bool fold_alignment_padding) {
  const std::int64_t padded = padded_length(length, multiple);
  return SequenceLength{fold_alignment_padding ? padded : length, padded};
}

}  // namespace dyncp::packing
