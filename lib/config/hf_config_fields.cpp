#include "config/hf_config_fields.hpp"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dyncp::config {

namespace {

using nlohmann::json;
using H = HfFieldHandling;

const char* const honoured_rope = "read into the model's RoPE (rope_theta, partial_rotary_factor)";

}  // namespace

const std::vector<HfConfigField>& hf_config_fields() {
  static const std::vector<HfConfigField> table = {
      // Shapes and the math every layer runs: read into ModelArchitecture.
      {"model_type", H::honoured, "selects the family: qwen3_moe, qwen3_next, qwen3_5_moe(_text)"},
      {"vocab_size", H::honoured, "embedding and lm_head rows"},
      {"hidden_size", H::honoured, "model width"},
      {"intermediate_size", H::honoured,
       "dense MLP width (mlp_only_layers, qwen3_next dense layers)"},
      {"num_hidden_layers", H::honoured, "layer count"},
      {"num_attention_heads", H::honoured, "query heads"},
      {"num_key_value_heads", H::honoured, "key/value heads (GQA)"},
      {"head_dim", H::honoured, "per-head width; absent: hidden_size / num_attention_heads"},
      {"rms_norm_eps", H::honoured, "every RMSNorm's epsilon (> 0)"},
      {"rope_theta", H::honoured, honoured_rope},
      {"partial_rotary_factor", H::honoured, honoured_rope},
      {"rope_parameters", H::refused_unless_supported,
       "rope_type default, linear, yarn, llama3 and dynamic honoured (inverse frequencies and "
       "YaRN's attention factor as transformers builds them; dynamic per sequence, with the NTK "
       "base transformers computes for that sequence run alone); mrope_section / "
       "mrope_interleaved equal plain RoPE on text positions; longrope and other types are "
       "refused"},
      {"rope_scaling", H::refused_unless_supported,
       "the transformers 4.x name of rope_parameters: the same types honoured and refused"},
      {"tie_word_embeddings", H::honoured,
       "lm_head shares embed_tokens; for a nested Qwen3.5 config the top-level flag decides, as "
       "transformers ties by it"},
      {"hidden_act", H::refused_unless_supported, "silu only (SwiGLU experts)"},
      {"attention_bias", H::refused_unless_supported, "false only: no q/k/v/o biases"},
      {"attention_dropout", H::refused_unless_supported,
       "0 only: dropout would change the training math"},
      {"use_sliding_window", H::refused_unless_supported,
       "qwen3_moe: true honoured (every layer's attention sees sliding_window positions back, "
       "on global positions, under every CP exchange and on both devices); refused for the "
       "hybrid types, whose transformers attention has no window"},
      {"sliding_window", H::honoured,
       "the window (default 4096) when use_sliding_window is true; transformers ignores it "
       "otherwise"},
      {"max_window_layers", H::refused_unless_supported,
       "transformers 4.x slid only layers >= max_window_layers, 5.x slides every layer: with "
       "use_sliding_window true only 0 (or absent) is accepted, where both agree"},
      {"pad_token_id", H::honoured,
       "that embedding row gets no gradient from the lookup, as nn.Embedding(padding_idx); the "
       "tied lm_head still trains it"},
      {"num_experts", H::honoured, "experts per MoE layer"},
      {"num_local_experts", H::honoured, "the transformers 5.x qwen3_moe name of num_experts"},
      {"num_experts_per_tok", H::honoured, "router top-k"},
      {"moe_intermediate_size", H::honoured, "expert FFN width"},
      {"decoder_sparse_step", H::honoured, "MoE layer spacing"},
      {"mlp_only_layers", H::honoured, "layers with a dense MLP"},
      {"norm_topk_prob", H::honoured, "renormalise the top-k router weights"},
      {"router_aux_loss_coef", H::honoured, "load-balancing loss coefficient"},
      {"shared_expert_intermediate_size", H::honoured, "shared expert width (hybrid models)"},
      {"layer_types", H::honoured, "full_attention / linear_attention per layer"},
      {"full_attention_interval", H::honoured, "layer_types when absent (every n-th is full)"},
      {"linear_num_key_heads", H::honoured, "Gated DeltaNet key heads"},
      {"linear_num_value_heads", H::honoured, "Gated DeltaNet value heads"},
      {"linear_key_head_dim", H::honoured, "Gated DeltaNet key head width"},
      {"linear_value_head_dim", H::honoured, "Gated DeltaNet value head width"},
      {"linear_conv_kernel_dim", H::honoured, "Gated DeltaNet causal conv width"},
      {"text_config", H::honoured, "the language model of a Qwen3.5 vision-language config"},
      {"is_encoder_decoder", H::refused_unless_supported, "false only"},
      {"quantization_config", H::refused_unless_supported,
       "absent only: quantized weights are not supported"},
      // Inert: they select outputs, storage or inference behaviour, never the training math.
      {"max_position_embeddings", H::honoured,
       "the original context of yarn / llama3 when rope_parameters has none, and the length up "
       "to which dynamic RoPE is default RoPE (a longer sequence gets its own NTK base); no "
       "bound on positions otherwise (sequences are bounded by model.seq_length)"},
      {"output_router_logits", H::inert,
       "selects HF's forward outputs (and its optional aux loss); dyncp-train always adds the "
       "load-balancing loss with router_aux_loss_coef"},
      {"initializer_range", H::inert,
       "random initialisation only; weights come from the checkpoint"},
      {"bos_token_id", H::inert, "generation only; written back on HF export"},
      {"eos_token_id", H::inert, "generation only; written back on HF export"},
      {"dtype", H::inert, "storage dtype of the weights; the recipe's precision decides compute"},
      {"torch_dtype", H::inert, "the transformers 4.x name of dtype"},
      {"use_cache", H::inert, "inference KV cache"},
      {"chunk_size_feed_forward", H::inert, "HF's feed-forward chunking computes the same values"},
      {"output_attentions", H::inert, "HF forward outputs"},
      {"output_hidden_states", H::inert, "HF forward outputs"},
      {"return_dict", H::inert, "HF forward outputs"},
      {"problem_type", H::inert, "sequence-classification heads only"},
      {"id2label", H::inert, "classification heads only"},
      {"label2id", H::inert, "classification heads only"},
      {"architectures", H::inert, "the HF class name; model_type decides"},
      {"_name_or_path", H::inert, "where HF loaded the config from"},
      {"transformers_version", H::inert, "writer's version"},
      {"vision_config", H::inert,
       "the vision tower: text-only training never runs it and its weights are not loaded"},
      {"image_token_id", H::inert, "vision placeholder token; text-only data"},
      {"video_token_id", H::inert, "vision placeholder token; text-only data"},
      {"vision_start_token_id", H::inert, "vision placeholder token; text-only data"},
      {"vision_end_token_id", H::inert, "vision placeholder token; text-only data"},
      {"mtp_num_hidden_layers", H::inert,
       "multi-token-prediction layers: transformers does not build them, dyncp-train does not "
       "train them"},
      {"mtp_use_dedicated_embeddings", H::inert, "multi-token-prediction layers (see above)"},
  };
  return table;
}

const HfConfigField* find_hf_config_field(std::string_view name) {
  for (const HfConfigField& field : hf_config_fields()) {
    if (field.name == name) return &field;
  }
  return nullptr;
}

namespace {

// rope_parameters / rope_scaling: the types implemented, each with the keys transformers
// reads for it (mrope keys are plain RoPE on text positions).
bool supported_rope(const json& value, std::string& why) {
  if (value.is_null()) return true;
  if (!value.is_object()) {
    why = "must be an object";
    return false;
  }
  std::string type = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (value.contains(key) && value[key].is_string()) type = value[key].get<std::string>();
  }
  std::vector<std::string_view> keys = {"rope_type",     "type",
                                        "rope_theta",    "partial_rotary_factor",
                                        "mrope_section", "mrope_interleaved"};
  std::vector<std::string_view> required;
  if (type == "linear" || type == "dynamic") {
    keys.push_back("factor");
    required = {"factor"};
  } else if (type == "yarn") {
    for (const char* key : {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                            "truncate", "attention_factor", "mscale", "mscale_all_dim"})
      keys.push_back(key);
    required = {"factor"};
  } else if (type == "llama3") {
    for (const char* key :
         {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"})
      keys.push_back(key);
    required = {"factor", "low_freq_factor", "high_freq_factor"};
  } else if (type != "default") {
    why = "rope_type '" + type +
          "' is not implemented (default, linear, dynamic, yarn and llama3 are); longrope's "
          "short/long switch depends on the batch's longest sequence";
    return false;
  }
  for (const auto& [key, item] : value.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      why = "key '" + key + "' has no meaning for rope_type " + type;
      return false;
    }
    if (key != "rope_type" && key != "type" && key != "mrope_section" && key != "truncate" &&
        key != "mrope_interleaved" && !item.is_null() && !item.is_number()) {
      why = "key '" + key + "' must be a number";
      return false;
    }
  }
  for (const std::string_view key : required) {
    if (!value.contains(key) || !value[key].is_number()) {
      why = "rope_type " + type + " needs a number '" + std::string(key) + "'";
      return false;
    }
  }
  return true;
}

bool supported_value(std::string_view name, const json& value, std::string& why) {
  if (name == "rope_parameters" || name == "rope_scaling") return supported_rope(value, why);
  if (value.is_null()) return name != "quantization_config";
  if (name == "hidden_act") return value == "silu";
  if (name == "attention_bias" || name == "is_encoder_decoder") return value == false;
  if (name == "use_sliding_window") return value.is_boolean();
  if (name == "attention_dropout") return value.is_number() && value.get<double>() == 0.0;
  if (name == "max_window_layers") return value.is_number_integer();
  if (name == "quantization_config") return false;
  return true;
}

}  // namespace

std::vector<std::string> check_hf_config_fields(const json& fields, const std::string& scope,
                                                const std::string& file) {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : fields.items()) {
    const HfConfigField* field = find_hf_config_field(name);
    const std::string path = scope.empty() ? name : scope + "." + name;
    if (field == nullptr) {
      unknown.push_back(path);
      continue;
    }
    if (field->handling != HfFieldHandling::refused_unless_supported) continue;
    std::string why;
    if (!supported_value(name, value, why)) {
      core::throw_data_error(
          file, "config.json field " + path + " = " + value.dump() +
                    " is not supported: " + (why.empty() ? std::string(field->note) : why));
    }
  }
  return unknown;
}

}  // namespace dyncp::config
