// Consistency of the model architecture keys. Runs before the parallel rules so that derived
// dims (head_dim, layer_types) are filled.

#include <algorithm>
#include <cstdio>
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
std::string fmt_parameters(double parameters) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3g parameters", parameters);
  return text;
}

// Sizes far past any real model (about 10x the largest Qwen MoE), refused before anything is
// derived from them: resolve() builds per-layer tables, and the memory estimate multiplies them.
bool check_architecture_sizes(const ModelArchitecture& arch, ProblemList& problems) {
  struct Cap {
    const char* key;
    std::int64_t value;
    std::int64_t max;
  };
  const Cap caps[] = {
      {"model.num_hidden_layers", arch.num_hidden_layers, 1024},
      {"model.hidden_size", arch.hidden_size, 1 << 16},
      {"model.intermediate_size", arch.intermediate_size, 1 << 20},
      {"model.moe_intermediate_size", arch.moe_intermediate_size, 1 << 20},
      {"model.shared_expert_intermediate_size", arch.shared_expert_intermediate_size, 1 << 20},
      {"model.vocab_size", arch.vocab_size, 1 << 24},
      {"model.num_attention_heads", arch.num_attention_heads, 1024},
      {"model.num_key_value_heads", arch.num_key_value_heads, 1024},
      {"model.head_dim", arch.head_dim, 4096},
      {"model.num_experts", arch.num_experts, 4096},
      {"model.num_experts_per_tok", arch.num_experts_per_tok, 4096},
      {"model.linear_num_key_heads", arch.linear_num_key_heads, 1024},
      {"model.linear_num_value_heads", arch.linear_num_value_heads, 1024},
      {"model.linear_key_head_dim", arch.linear_key_head_dim, 4096},
      {"model.linear_value_head_dim", arch.linear_value_head_dim, 4096},
      {"model.linear_conv_kernel_dim", arch.linear_conv_kernel_dim, 1024},
      {"model.max_position_embeddings", arch.max_position_embeddings, std::int64_t{1} << 32},
  };
  bool fits = true;
  for (const Cap& cap : caps) {
    if (cap.value > cap.max) {
      problems.add(cap.key, str(cap.value),
                   "exceeds " + str(cap.max) +
                       ", far past any real model; check the value (or "
                       "the config.json it came from)");
      fits = false;
    }
  }
  if (!fits) return false;
  // Parameters, in double so that no product overflows: embeddings and head, attention,
  // experts and dense MLPs per layer.
  const double hidden = static_cast<double>(arch.hidden_size);
  const double head_dim = static_cast<double>(
      arch.head_dim > 0 ? arch.head_dim
                        : arch.hidden_size / std::max<std::int64_t>(1, arch.num_attention_heads));
  const double attention = hidden * head_dim * 2.0 *
                           static_cast<double>(arch.num_attention_heads + arch.num_key_value_heads);
  const double mlp =
      3.0 * hidden *
      (static_cast<double>(arch.num_experts) * static_cast<double>(arch.moe_intermediate_size) +
       static_cast<double>(arch.intermediate_size) +
       static_cast<double>(arch.shared_expert_intermediate_size));
  const double linear_width =
      static_cast<double>(arch.linear_num_key_heads * arch.linear_key_head_dim +
                          arch.linear_num_value_heads * arch.linear_value_head_dim);
  const double deltanet = arch.is_hybrid() ? 4.0 * hidden * linear_width : 0.0;
  const double parameters =
      2.0 * static_cast<double>(arch.vocab_size) * hidden +
      static_cast<double>(arch.num_hidden_layers) * (attention + mlp + deltanet);
  // fp32 weights, gradients and two Adam moments: 16 bytes a parameter, over the whole job.
  constexpr double max_state_bytes = 1125899906842624.0;  // 1 PiB
  if (parameters * 16.0 > max_state_bytes) {
    problems.add("model", fmt_parameters(parameters),
                 "the weights, gradients and optimizer state would take more than 1 PiB; no "
                 "job of this program holds that. Check the model sizes");
    return false;
  }
  return true;
}

}  // namespace

void check_model_architecture(ConfigContainer& config, ProblemList& problems) {
  auto& arch = config.model.architecture;
  const std::size_t problems_before = problems.lines().size();
  // Nothing else is checked or derived from sizes like these: report them (and what came
  // before) now.
  if (!check_architecture_sizes(arch, problems)) problems.throw_if_any();

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
  // The GPU path's MoE dispatch kernels (docs/cuda.md 7.2) hold per-block expert counts and a
  // block's assignments in shared memory; the unfused plan kernel is one block of 1024 threads.
  if (arch.num_experts > 0 && config.dist.device != Device::cpu) {
    if (config.model.moe_permute_fusion && arch.num_experts_per_tok > 32) {
      problems.add("model.moe_permute_fusion", "true",
                   "the GPU's fused dispatch takes top-k up to 32 (model.num_experts_per_tok " +
                       str(arch.num_experts_per_tok) +
                       "); set it to false (up to 1024 experts) or dist.device: cpu");
    } else if (!config.model.moe_permute_fusion && arch.num_experts > 1024) {
      problems.add("model.moe_permute_fusion", "false",
                   "the GPU's unfused permutation plan takes up to 1024 experts (model has " +
                       str(arch.num_experts) + "); set it to true or dist.device: cpu");
    }
  }
  if (config.model.moe_shared_expert_overlap && arch.shared_expert_intermediate_size == 0) {
    problems.add("model.moe_shared_expert_overlap", "true",
                 "the model has no shared expert to overlap (shared_expert_intermediate_size is "
                 "unset); set it to false");
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
