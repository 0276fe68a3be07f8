// Consistency of the model architecture keys. Runs before the parallel rules so that derived
// dims (head_dim, layer_types) are filled.

#include <algorithm>
#include <string>

#include "config/key_table.hpp"
#include "config/validation_rules.hpp"

namespace dyncp::config::detail {

namespace {

std::string str(std::int64_t value) {
  return std::to_string(value);
}
std::string num(double value) {
  return format_value(KeyValue{value});
}

}  // namespace

void check_model_architecture(ConfigContainer& config, ProblemList& problems) {
  auto& arch = config.model.architecture;
  const std::size_t problems_before = problems.lines().size();

  if (arch.head_dim == 0 && arch.hidden_size % arch.num_attention_heads != 0) {
    problems.add("model.head_dim", "0",
                 "cannot be derived: model.hidden_size " + str(arch.hidden_size) +
                     " is not divisible by model.num_attention_heads " +
                     str(arch.num_attention_heads) + "; set model.head_dim explicitly");
  }
  if (arch.num_attention_heads % arch.num_key_value_heads != 0) {
    problems.add("model.num_attention_heads", str(arch.num_attention_heads),
                 "must be divisible by model.num_key_value_heads " + str(arch.num_key_value_heads) +
                     " (each KV head serves a whole group of "
                     "query heads)");
  }
  if (arch.num_experts > 0 && arch.num_experts_per_tok > arch.num_experts) {
    problems.add("model.num_experts_per_tok", str(arch.num_experts_per_tok),
                 "must be <= model.num_experts " + str(arch.num_experts));
  }
  if (arch.hidden_act != "silu") {
    problems.add("model.hidden_act", arch.hidden_act,
                 "only silu (SwiGLU experts) is implemented; set it to silu");
  }
  if (!(arch.rms_norm_eps > 0)) {
    problems.add("model.rms_norm_eps", num(arch.rms_norm_eps), "must be > 0");
  }
  if (!(arch.rope_theta > 0)) problems.add("model.rope_theta", num(arch.rope_theta), "must be > 0");
  if (!(arch.partial_rotary_factor > 0 && arch.partial_rotary_factor <= 1)) {
    problems.add("model.partial_rotary_factor", num(arch.partial_rotary_factor),
                 "must be in (0, 1]");
  }
  if (arch.router_aux_loss_coef < 0) {
    problems.add("model.router_aux_loss_coef", num(arch.router_aux_loss_coef), "must be >= 0");
  }
  for (const auto layer : arch.mlp_only_layers) {
    if (layer >= arch.num_hidden_layers) {
      problems.add(
          "model.mlp_only_layers", str(layer),
          "is not a layer index (model.num_hidden_layers is " + str(arch.num_hidden_layers) + ")");
    }
  }
  if (arch.is_hybrid()) {
    if (arch.linear_num_value_heads % arch.linear_num_key_heads != 0) {
      problems.add(
          "model.linear_num_value_heads", str(arch.linear_num_value_heads),
          "must be divisible by model.linear_num_key_heads " + str(arch.linear_num_key_heads));
    }
  } else if (std::find(arch.layer_types.begin(), arch.layer_types.end(),
                       LayerMixer::linear_attention) != arch.layer_types.end()) {
    problems.add("model.layer_types", "linear_attention",
                 "needs a hybrid model_type (qwen3_next, qwen3_5_moe, qwen3_5_moe_text), not " +
                     arch.model_type);
  }
  if (!arch.layer_types.empty() &&
      static_cast<std::int64_t>(arch.layer_types.size()) != arch.num_hidden_layers) {
    problems.add("model.layer_types",
                 str(static_cast<std::int64_t>(arch.layer_types.size())) + " entries",
                 "needs one entry per layer (model.num_hidden_layers is " +
                     str(arch.num_hidden_layers) + ")");
  }
  // Derive only from consistent dims, so resolve() never computes from bad input.
  if (problems.lines().size() == problems_before) {
    arch.resolve();
    if (arch.rotary_dim() < 2) {
      problems.add("model.partial_rotary_factor", num(arch.partial_rotary_factor),
                   "rotates fewer than 2 of head_dim " + str(arch.head_dim) + " dims; raise it");
    }
  }
}

}  // namespace dyncp::config::detail
