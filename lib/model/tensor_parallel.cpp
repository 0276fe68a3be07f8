#include "model/tensor_parallel.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::model {

namespace {

// `count` of `field` must divide over `parts` ranks (the config rules refuse it first; this
// guards direct users of the model).
void require_divisible(const char* key, const char* field, std::int64_t count, int parts) {
  if (parts > 1 && count % parts != 0)
    core::throw_config_error(
        key, std::to_string(parts) + ": must divide " + field + " (" + std::to_string(count) + ")");
}

}  // namespace

void validate_tensor_parallel_shape(const config::ModelArchitecture& a,
                                    const TensorParallelShape& shape) {
  const char* tp_key = "model.tensor_model_parallel_size";
  if (shape.size < 1 || shape.index < 0 || shape.index >= shape.size)
    core::throw_config_error(tp_key, "rank " + std::to_string(shape.index) + " of " +
                                         std::to_string(shape.size) + " TP ranks");
  if (shape.expert_size != 1 && shape.expert_size != shape.size)
    core::throw_config_error(
        "model.expert_tensor_parallel_size",
        std::to_string(shape.expert_size) + ": must be 1 or " + std::to_string(shape.size));
  if (shape.expert_index < 0 || shape.expert_index >= shape.expert_size)
    core::throw_config_error("model.expert_tensor_parallel_size",
                             "rank " + std::to_string(shape.expert_index) + " of " +
                                 std::to_string(shape.expert_size) + " expert-TP ranks");
  if (shape.sequence_parallel && shape.size == 1)
    core::throw_config_error("model.sequence_parallel",
                             "true needs tensor_model_parallel_size > 1");
  require_divisible(tp_key, "vocab_size", a.vocab_size, shape.size);
  bool any_attention = false, any_linear = false, any_dense = false, any_moe = false;
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer) {
    (a.mixer_of_layer(layer) == config::LayerMixer::full_attention ? any_attention : any_linear) =
        true;
    (a.is_moe_layer(layer) ? any_moe : any_dense) = true;
  }
  if (any_attention) {
    require_divisible(tp_key, "num_attention_heads", a.num_attention_heads, shape.size);
    require_divisible(tp_key, "num_key_value_heads", a.num_key_value_heads, shape.size);
  }
  if (any_linear) {
    require_divisible(tp_key, "linear_num_key_heads", a.linear_num_key_heads, shape.size);
    require_divisible(tp_key, "linear_num_value_heads", a.linear_num_value_heads, shape.size);
  }
  if (any_dense) require_divisible(tp_key, "intermediate_size", a.intermediate_size, shape.size);
  if (any_moe) {
    require_divisible("model.expert_tensor_parallel_size", "moe_intermediate_size",
                      a.moe_intermediate_size, shape.expert_size);
    if (a.is_hybrid())
      require_divisible(tp_key, "shared_expert_intermediate_size",
                        a.shared_expert_intermediate_size, shape.size);
  }
}

config::ModelArchitecture local_architecture(const config::ModelArchitecture& whole,
                                             const TensorParallelShape& shape) {
  validate_tensor_parallel_shape(whole, shape);
  config::ModelArchitecture a = whole;
  const std::int64_t tp = shape.size;
  a.vocab_size /= tp;
  a.num_attention_heads /= tp;
  a.num_key_value_heads /= tp;
  a.intermediate_size /= tp;
  a.shared_expert_intermediate_size /= tp;
  a.linear_num_key_heads /= tp;
  a.linear_num_value_heads /= tp;
  a.moe_intermediate_size /= shape.expert_size;
  return a;
}

std::pair<std::int64_t, std::int64_t> tensor_parallel_row_range(std::int64_t rows, int size,
                                                                int index) {
  return {rows * index / size, rows * (index + 1) / size};
}

void LocalTensorParallelContext::all_gather_rows(const SeamContext&, const Tensor& shard,
                                                 const Tensor& full) {
  if (full.raw_data() != shard.raw_data()) full.copy_from(shard);
}

void LocalTensorParallelContext::reduce_scatter_rows(const SeamContext&, const Tensor& full,
                                                     const Tensor& shard) {
  if (full.raw_data() != shard.raw_data()) shard.copy_from(full);
}

}  // namespace dyncp::model
