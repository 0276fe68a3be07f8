// Rules for tensor parallelism (model.tensor_model_parallel_size, model.sequence_parallel,
// model.expert_tensor_parallel_size), after Megatron-Core's TransformerConfig and
// initialize_model_parallel checks: every tensor TP splits must divide evenly over tp, the
// world must hold tp x cp x dp ranks, and the experts etp x ep ranks. Every problem names the
// key, the value and the tp values that would work.

#include <string>
#include <vector>

#include "config/validation_rules.hpp"

namespace dyncp::config::detail {

namespace {

std::string str(std::int64_t value) {
  return std::to_string(value);
}

// One size TP splits: `count` of the thing named by `key` over tp ranks.
struct TensorSplit {
  const char* key;
  std::int64_t count;
  const char* what;  // what the split means, for the message
};

std::vector<TensorSplit> tensor_splits(const ModelArchitecture& arch) {
  std::vector<TensorSplit> splits = {
      {"model.num_attention_heads", arch.num_attention_heads,
       "query heads (q is column-parallel by heads)"},
      // Megatron's rule: the K/V heads (query groups) are split too, never replicated.
      {"model.num_key_value_heads", arch.num_key_value_heads,
       "K/V heads (Megatron's num_query_groups must be a multiple of tp)"},
      {"model.vocab_size", arch.vocab_size,
       "vocabulary rows (the embedding and LM head are vocabulary-parallel)"},
  };
  bool has_dense_layer = arch.num_experts == 0;
  for (std::int64_t layer = 0; layer < arch.num_hidden_layers && !has_dense_layer; ++layer) {
    has_dense_layer = !arch.is_moe_layer(layer);
  }
  if (has_dense_layer) {
    splits.push_back({"model.intermediate_size", arch.intermediate_size,
                      "dense SwiGLU columns (gate/up column-parallel, down row-parallel)"});
  }
  if (arch.num_experts > 0 && arch.shared_expert_intermediate_size > 0) {
    splits.push_back({"model.shared_expert_intermediate_size", arch.shared_expert_intermediate_size,
                      "shared-expert columns (split like the dense MLP)"});
  }
  if (arch.is_hybrid()) {
    splits.push_back(
        {"model.linear_num_key_heads", arch.linear_num_key_heads, "Gated DeltaNet key heads"});
    splits.push_back({"model.linear_num_value_heads", arch.linear_num_value_heads,
                      "Gated DeltaNet value heads"});
  }
  return splits;
}

// The tp values in [1, world] that divide the world / cp and every split.
std::vector<std::int64_t> workable_tp_values(const ModelConfig& model, std::int64_t world_size) {
  std::vector<std::int64_t> values;
  const auto splits = tensor_splits(model.architecture);
  for (std::int64_t tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp != 0 || (world_size / tp) % model.context_parallel_size != 0) continue;
    bool divides = true;
    for (const TensorSplit& split : splits) divides = divides && split.count % tp == 0;
    if (divides) values.push_back(tp);
  }
  return values;
}

std::string list_text(const std::vector<std::int64_t>& values) {
  std::string text;
  for (const std::int64_t value : values) text += (text.empty() ? "" : ", ") + str(value);
  return text.empty() ? "none" : text;
}

}  // namespace

void check_tensor_parallel(ConfigContainer& config, std::int64_t world_size,
                           ProblemList& problems) {
  const ModelConfig& model = config.model;
  const std::int64_t tp = model.tensor_model_parallel_size;
  const std::string tp_key = "model.tensor_model_parallel_size";
  if (tp < 1) {
    problems.add(tp_key, str(tp), "must be >= 1");
    return;
  }
  const std::string workable = "tp values that work for this model on " + str(world_size) +
                               " ranks with cp " + str(model.context_parallel_size) + ": " +
                               list_text(workable_tp_values(model, world_size));
  if (model.sequence_parallel && tp == 1) {
    problems.add("model.sequence_parallel", "true",
                 "needs model.tensor_model_parallel_size > 1 (it shards the sequence inside a TP "
                 "group); set it to false or raise tp");
  }
  if (world_size % tp != 0) {
    problems.add(
        tp_key, str(tp),
        "must divide the world size " + str(world_size) + " (world = tp x cp x dp); " + workable);
  }
  for (const TensorSplit& split : tensor_splits(model.architecture)) {
    if (split.count % tp == 0) continue;
    problems.add(tp_key, str(tp),
                 "must divide " + std::string(split.key) + " = " + str(split.count) + " (" +
                     split.what + "); " + workable);
  }
  const std::int64_t etp = model.expert_tensor_parallel_size.value_or(tp);
  // Set to tp it means what unset means: kept unset, so a Bridge dump's explicit 1 at tp 1
  // resolves to the same config as a recipe that leaves it out.
  if (etp == tp) config.model.expert_tensor_parallel_size.reset();
  if (etp != 1 && etp != tp) {
    problems.add("model.expert_tensor_parallel_size", str(etp),
                 "must be 1 (whole experts on each EP rank) or tensor_model_parallel_size " +
                     str(tp) + " (each expert split over its TP group)");
    return;
  }
  if (etp > 1 && model.architecture.num_experts > 0 &&
      model.architecture.moe_intermediate_size % etp != 0) {
    problems.add("model.expert_tensor_parallel_size", str(etp),
                 "must divide model.moe_intermediate_size = " +
                     str(model.architecture.moe_intermediate_size) +
                     " (each expert's columns are split over etp ranks); set it to 1");
  }
  const std::int64_t ep = model.expert_model_parallel_size;
  if (tp > 1 && ep > 0 && world_size % (etp * ep) != 0) {
    problems.add("model.expert_model_parallel_size", str(ep),
                 "expert_tensor_parallel_size " + str(etp) + " x " + str(ep) +
                     " must divide the world size " + str(world_size) +
                     " (Megatron's expert "
                     "layout etp x ep x expert-dp); use a smaller ep" +
                     (etp > 1 ? std::string(" or expert_tensor_parallel_size=1") : ""));
  }
}

}  // namespace dyncp::config::detail
