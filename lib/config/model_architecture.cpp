#include "config/model_architecture.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "config/hf_config_fields.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text_check.hpp"

namespace dyncp::config {

namespace {

using nlohmann::json;

template <typename T>
void read_field(const json& object, const char* name, T& out, const std::string& file) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return;
  // nlohmann converts 4.5 to 4 and 2^64-1 to -1: a count must be a JSON integer that fits.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() && it->template get<std::uint64_t>() >
                                         static_cast<std::uint64_t>(std::numeric_limits<T>::max())))
      core::throw_data_error(file, std::string("field '") + name + "' = " + it->dump() +
                                       " is not an integer this program can hold");
  }
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    core::throw_data_error(file,
                           std::string("field '") + name + "' has the wrong type: " + it->dump());
  }
}

// Values no supported checkpoint comes near, so a typo or a corrupted file is refused before it
// ends in a null loss or an out-of-memory failure.
constexpr std::int64_t max_width = std::int64_t{1} << 20;
constexpr std::int64_t max_layers = 4096;
constexpr std::int64_t max_vocab = std::int64_t{1} << 26;
constexpr std::int64_t max_heads = 4096;
constexpr std::int64_t max_experts = 1 << 16;

void require_range(std::int64_t value, std::int64_t low, std::int64_t high, const char* field,
                   const std::string& file) {
  if (value < low || value > high) {
    core::throw_data_error(file, std::string("config.json field ") + field + " = " +
                                     std::to_string(value) + " is out of range [" +
                                     std::to_string(low) + ", " + std::to_string(high) + "]");
  }
}

// Range checks of a loaded config; every failure names the field, its value and the bounds.
void check_ranges(const ModelArchitecture& a, const std::string& file) {
  require_range(a.vocab_size, 1, max_vocab, "vocab_size", file);
  require_range(a.hidden_size, 1, max_width, "hidden_size", file);
  require_range(a.num_hidden_layers, 1, max_layers, "num_hidden_layers", file);
  require_range(a.num_attention_heads, 1, max_heads, "num_attention_heads", file);
  require_range(a.num_key_value_heads, 1, a.num_attention_heads, "num_key_value_heads", file);
  if (a.num_attention_heads % a.num_key_value_heads != 0) {
    core::throw_data_error(
        file,
        "config.json: num_attention_heads = " + std::to_string(a.num_attention_heads) +
            " is not a multiple of num_key_value_heads = " + std::to_string(a.num_key_value_heads));
  }
  require_range(a.head_dim, 1, max_width, "head_dim", file);
  require_range(a.max_position_embeddings, 1, std::int64_t{1} << 32, "max_position_embeddings",
                file);
  if (!(a.rms_norm_eps > 0.0 && a.rms_norm_eps < 1.0)) {
    core::throw_data_error(file, "config.json field rms_norm_eps = " +
                                     std::to_string(a.rms_norm_eps) + " must lie in (0, 1)");
  }
  if (!(a.rope_theta > 0.0) || !std::isfinite(a.rope_theta)) {
    core::throw_data_error(file, "config.json field rope_theta = " + std::to_string(a.rope_theta) +
                                     " must be positive");
  }
  if (!(a.partial_rotary_factor > 0.0 && a.partial_rotary_factor <= 1.0)) {
    core::throw_data_error(file, "config.json field partial_rotary_factor = " +
                                     std::to_string(a.partial_rotary_factor) +
                                     " must lie in (0, 1]");
  }
  const std::int64_t frequencies = a.rope_frequency_dim();
  if (frequencies < 1 || a.rotary_dim() > a.head_dim) {
    core::throw_data_error(
        file, "config.json: head_dim * partial_rotary_factor = " + std::to_string(frequencies) +
                  " rotary dims: transformers rotates it rounded up to even, which must be at "
                  "least 2 and fit in head_dim " +
                  std::to_string(a.head_dim));
  }
  const RopeScalingFields& rope = a.rope_scaling;
  if (rope.rope_type != "default" && !(rope.factor >= 1.0 && std::isfinite(rope.factor))) {
    core::throw_data_error(file,
                           "config.json rope_parameters.factor = " + std::to_string(rope.factor) +
                               " (rope_type " + rope.rope_type + ") must be a number >= 1");
  }
  if (rope.rope_type == "yarn" && frequencies % 2 != 0) {
    core::throw_data_error(file, "config.json: rope_type yarn with an odd rotary dimension " +
                                     std::to_string(frequencies) +
                                     " (head_dim * partial_rotary_factor) is not supported: "
                                     "transformers' YaRN ramp has a different length then");
  }
  if (rope.rope_type == "llama3" &&
      !(rope.high_freq_factor > rope.low_freq_factor && rope.low_freq_factor > 0.0)) {
    core::throw_data_error(file,
                           "config.json rope_parameters: llama3 needs high_freq_factor > "
                           "low_freq_factor > 0, got " +
                               std::to_string(rope.high_freq_factor) + " and " +
                               std::to_string(rope.low_freq_factor));
  }
  if ((rope.rope_type == "yarn" || rope.rope_type == "llama3") &&
      !(rope.original_max_position_embeddings >= 1.0)) {
    core::throw_data_error(file, "config.json rope_parameters.original_max_position_embeddings = " +
                                     std::to_string(rope.original_max_position_embeddings) +
                                     " must be >= 1");
  }
  if (a.pad_token_id >= a.vocab_size) {
    core::throw_data_error(file,
                           "config.json field pad_token_id = " + std::to_string(a.pad_token_id) +
                               " is not a row of vocab_size " + std::to_string(a.vocab_size));
  }
  if (!(a.router_aux_loss_coef >= 0.0) || !std::isfinite(a.router_aux_loss_coef)) {
    core::throw_data_error(file, "config.json field router_aux_loss_coef = " +
                                     std::to_string(a.router_aux_loss_coef) + " must be >= 0");
  }
  if (a.num_experts > 0) {
    require_range(a.num_experts, 1, max_experts, "num_experts", file);
    require_range(a.num_experts_per_tok, 1, a.num_experts, "num_experts_per_tok", file);
    require_range(a.moe_intermediate_size, 1, max_width, "moe_intermediate_size", file);
  }
  require_range(a.intermediate_size, 0, max_width, "intermediate_size", file);
  require_range(a.shared_expert_intermediate_size, 0, max_width, "shared_expert_intermediate_size",
                file);
  require_range(a.decoder_sparse_step, 1, max_layers, "decoder_sparse_step", file);
  if (a.is_hybrid()) {
    require_range(a.linear_num_key_heads, 1, max_heads, "linear_num_key_heads", file);
    require_range(a.linear_num_value_heads, 1, max_heads, "linear_num_value_heads", file);
    require_range(a.linear_key_head_dim, 1, max_width, "linear_key_head_dim", file);
    require_range(a.linear_value_head_dim, 1, max_width, "linear_value_head_dim", file);
    require_range(a.linear_conv_kernel_dim, 1, 64, "linear_conv_kernel_dim", file);
    if (a.linear_num_value_heads % a.linear_num_key_heads != 0) {
      core::throw_data_error(file, "config.json: linear_num_value_heads = " +
                                       std::to_string(a.linear_num_value_heads) +
                                       " is not a multiple of linear_num_key_heads = " +
                                       std::to_string(a.linear_num_key_heads));
    }
  }
  for (const std::int64_t layer : a.mlp_only_layers)
    require_range(layer, 0, a.num_hidden_layers - 1, "mlp_only_layers[]", file);
}

// use_sliding_window / sliding_window / max_window_layers as transformers 5.x Qwen3-MoE reads
// them: every layer slides, sliding_window defaulting to 4096. 4.x slid only the layers from
// max_window_layers on, so a config whose two readings differ is refused.
void read_sliding_window(const json& f, ModelArchitecture& arch, const std::string& file) {
  bool use = false;
  read_field(f, "use_sliding_window", use, file);
  if (!use) return;
  if (arch.model_type != "qwen3_moe") {
    core::throw_data_error(file,
                           "config.json field use_sliding_window = true is not supported for "
                           "model_type " +
                               arch.model_type + ": transformers' " + arch.model_type +
                               " attention has no sliding window; set it to false");
  }
  const auto window = f.find("sliding_window");
  if (window != f.end() && window->is_null()) return;  // transformers: no window
  arch.sliding_window = 4096;
  read_field(f, "sliding_window", arch.sliding_window, file);
  if (arch.sliding_window < 1) {
    core::throw_data_error(file, "config.json field sliding_window = " +
                                     std::to_string(arch.sliding_window) + " must be >= 1");
  }
  std::int64_t max_window_layers = 0;
  read_field(f, "max_window_layers", max_window_layers, file);
  if (max_window_layers != 0) {
    core::throw_data_error(
        file, "config.json field max_window_layers = " + std::to_string(max_window_layers) +
                  " with use_sliding_window = true is not supported: transformers 4.x slides "
                  "only layers >= max_window_layers, 5.x slides every layer; set it to 0 (every "
                  "layer) or use_sliding_window to false");
  }
}

const std::vector<std::string> known_model_types = {"qwen3_moe", "qwen3_next", "qwen3_5_moe",
                                                    "qwen3_5_moe_text"};

}  // namespace

bool ModelArchitecture::is_moe_layer(std::int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

LayerMixer ModelArchitecture::mixer_of_layer(std::int64_t layer) const {
  if (layer_types.empty()) return LayerMixer::full_attention;
  return layer_types.at(static_cast<std::size_t>(layer));
}

std::int64_t ModelArchitecture::rope_frequency_dim() const {
  return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

std::int64_t ModelArchitecture::rotary_dim() const {
  const std::int64_t dim = rope_frequency_dim();
  return dim + dim % 2;
}

void ModelArchitecture::resolve() {
  if (head_dim == 0 && num_attention_heads > 0) head_dim = hidden_size / num_attention_heads;
  if (is_hybrid() && layer_types.empty() && full_attention_interval > 0) {
    for (std::int64_t i = 0; i < num_hidden_layers; ++i) {
      layer_types.push_back((i + 1) % full_attention_interval == 0 ? LayerMixer::full_attention
                                                                   : LayerMixer::linear_attention);
    }
  }
  if (model_type == "qwen3_5_moe" || model_type == "qwen3_5_moe_text") {
    norm_topk_prob = true;  // Qwen3.5 always renormalises the top-k weights
    decoder_sparse_step = 1;
    mlp_only_layers.clear();
  }
}

bool has_hf_weights(const std::string& folder) {
  const std::filesystem::path root(folder);
  std::error_code error;
  return std::filesystem::exists(root / "config.json", error) &&
         (std::filesystem::exists(root / "model.safetensors", error) ||
          std::filesystem::exists(root / "model.safetensors.index.json", error));
}

ModelArchitecture load_hf_model_config(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "config.json";
  const std::string name = file.string();
  if (!std::filesystem::exists(file))
    core::throw_data_error(name, "cannot open the model config (expected an HF config.json)");
  // HF configs are a few KiB; a FIFO, a device or a huge file is refused before reading.
  const std::string text = core::read_bounded_file(file, 16 << 20, "the model config");
  core::check_json_text(text, name);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& error) {
    core::throw_data_error(name, std::string("invalid JSON: ") + error.what());
  }
  if (!root.is_object()) core::throw_data_error(name, "expected a JSON object");

  ModelArchitecture arch;
  read_field(root, "model_type", arch.model_type, name);
  const json* fields = &root;
  if (root.contains("text_config") && root["text_config"].is_object()) {
    fields = &root["text_config"];
    std::string inner_type;
    read_field(*fields, "model_type", inner_type, name);
    if (!inner_type.empty()) arch.model_type = inner_type;
  }
  if (std::find(known_model_types.begin(), known_model_types.end(), arch.model_type) ==
      known_model_types.end()) {
    core::throw_data_error(name, "model_type '" + arch.model_type +
                                     "' is not supported; expected one of qwen3_moe, qwen3_next, "
                                     "qwen3_5_moe, qwen3_5_moe_text");
  }
  const json& f = *fields;
  std::vector<std::string> unknown = check_hf_config_fields(root, "", name);
  if (fields != &root) {
    const auto inner = check_hf_config_fields(*fields, "text_config", name);
    unknown.insert(unknown.end(), inner.begin(), inner.end());
  }
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& field : unknown) list += (list.empty() ? "" : ", ") + field;
    spdlog::warn(
        "{}: fields transformers' config classes do not define (transformers ignores "
        "them, so does dyncp-train): {}",
        name, list);
  }
  read_field(f, "vocab_size", arch.vocab_size, name);
  read_field(f, "hidden_size", arch.hidden_size, name);
  read_field(f, "intermediate_size", arch.intermediate_size, name);
  read_field(f, "num_hidden_layers", arch.num_hidden_layers, name);
  read_field(f, "num_attention_heads", arch.num_attention_heads, name);
  read_field(f, "num_key_value_heads", arch.num_key_value_heads, name);
  read_field(f, "head_dim", arch.head_dim, name);
  read_field(f, "max_position_embeddings", arch.max_position_embeddings, name);
  read_field(f, "rms_norm_eps", arch.rms_norm_eps, name);
  read_field(f, "rope_theta", arch.rope_theta, name);
  // The hybrid configs' defaults when a field is absent (Qwen3NextConfig / Qwen3_5MoeTextConfig).
  if (arch.is_hybrid()) {
    arch.partial_rotary_factor = 0.25;
    arch.shared_expert_intermediate_size = 512;
  }
  read_field(f, "partial_rotary_factor", arch.partial_rotary_factor, name);
  // transformers takes rope_scaling (4.x name) over rope_parameters when it is a non-empty
  // object (convert_rope_params_to_dict), with the top-level rope_theta / partial_rotary_factor
  // as defaults. The types and keys were checked by check_hf_config_fields above.
  const json* rope_object = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (f.contains(key) && f[key].is_object() && !f[key].empty()) rope_object = &f[key];
  }
  if (rope_object != nullptr) {
    const json& rope = *rope_object;
    read_field(rope, "rope_theta", arch.rope_theta, name);
    read_field(rope, "partial_rotary_factor", arch.partial_rotary_factor, name);
    RopeScalingFields& scaling = arch.rope_scaling;
    read_field(rope, "type", scaling.rope_type, name);
    read_field(rope, "rope_type", scaling.rope_type, name);
    read_field(rope, "factor", scaling.factor, name);
    read_field(rope, "original_max_position_embeddings", scaling.original_max_position_embeddings,
               name);
    read_field(rope, "beta_fast", scaling.beta_fast, name);
    read_field(rope, "beta_slow", scaling.beta_slow, name);
    read_field(rope, "truncate", scaling.truncate, name);
    read_field(rope, "attention_factor", scaling.attention_factor, name);
    read_field(rope, "mscale", scaling.mscale, name);
    read_field(rope, "mscale_all_dim", scaling.mscale_all_dim, name);
    read_field(rope, "low_freq_factor", scaling.low_freq_factor, name);
    read_field(rope, "high_freq_factor", scaling.high_freq_factor, name);
    // transformers: beta_fast / beta_slow of 0 mean the defaults (`or 32`, `or 1`).
    if (scaling.beta_fast == 0.0) scaling.beta_fast = 32.0;
    if (scaling.beta_slow == 0.0) scaling.beta_slow = 1.0;
  }
  // A top-level original_max_position_embeddings takes precedence (transformers'
  // standardize_rope_params); absent, it is max_position_embeddings.
  read_field(f, "original_max_position_embeddings",
             arch.rope_scaling.original_max_position_embeddings, name);
  if (arch.rope_scaling.original_max_position_embeddings == 0.0)
    arch.rope_scaling.original_max_position_embeddings =
        static_cast<double>(arch.max_position_embeddings);
  read_sliding_window(f, arch, name);
  read_field(f, "pad_token_id", arch.pad_token_id, name);
  read_field(f, "attention_bias", arch.attention_bias, name);
  // A nested (vision-language) Qwen3.5 config ties by its top-level flag, as transformers does;
  // save_pretrained writes text_config.tie_word_embeddings false next to a top-level true.
  read_field(f, "tie_word_embeddings", arch.tie_word_embeddings, name);
  if (fields != &root) read_field(root, "tie_word_embeddings", arch.tie_word_embeddings, name);
  read_field(f, "hidden_act", arch.hidden_act, name);
  read_field(f, "num_experts", arch.num_experts, name);
  read_field(f, "num_local_experts", arch.num_experts, name);
  read_field(f, "num_experts_per_tok", arch.num_experts_per_tok, name);
  read_field(f, "moe_intermediate_size", arch.moe_intermediate_size, name);
  read_field(f, "decoder_sparse_step", arch.decoder_sparse_step, name);
  read_field(f, "mlp_only_layers", arch.mlp_only_layers, name);
  read_field(f, "norm_topk_prob", arch.norm_topk_prob, name);
  read_field(f, "router_aux_loss_coef", arch.router_aux_loss_coef, name);
  read_field(f, "shared_expert_intermediate_size", arch.shared_expert_intermediate_size, name);
  read_field(f, "full_attention_interval", arch.full_attention_interval, name);
  read_field(f, "linear_num_key_heads", arch.linear_num_key_heads, name);
  read_field(f, "linear_num_value_heads", arch.linear_num_value_heads, name);
  read_field(f, "linear_key_head_dim", arch.linear_key_head_dim, name);
  read_field(f, "linear_value_head_dim", arch.linear_value_head_dim, name);
  read_field(f, "linear_conv_kernel_dim", arch.linear_conv_kernel_dim, name);
  read_field(f, "bos_token_id", arch.bos_token_id, name);
  read_field(f, "eos_token_id", arch.eos_token_id, name);
  if (f.contains("layer_types") && f["layer_types"].is_array()) {
    for (const auto& entry : f["layer_types"]) {
      const std::string type = entry.is_string() ? entry.get<std::string>() : entry.dump();
      if (type == "full_attention") {
        arch.layer_types.push_back(LayerMixer::full_attention);
      } else if (type == "linear_attention") {
        arch.layer_types.push_back(LayerMixer::linear_attention);
      } else {
        core::throw_data_error(name, "layer_types entry '" + type +
                                         "' is not one of full_attention, linear_attention");
      }
    }
  }
  if (!arch.is_hybrid()) arch.partial_rotary_factor = 1.0;
  arch.resolve();
  if (!arch.layer_types.empty() &&
      static_cast<std::int64_t>(arch.layer_types.size()) != arch.num_hidden_layers) {
    core::throw_data_error(name, "layer_types has " + std::to_string(arch.layer_types.size()) +
                                     " entries but num_hidden_layers is " +
                                     std::to_string(arch.num_hidden_layers));
  }
  check_ranges(arch, name);
  return arch;
}

std::string to_hf_config_json(const ModelArchitecture& arch) {
  json out;
  const bool hybrid = arch.is_hybrid();
  out["model_type"] = arch.model_type == "qwen3_5_moe" ? "qwen3_5_moe_text" : arch.model_type;
  if (arch.model_type == "qwen3_moe") {
    out["architectures"] = {"Qwen3MoeForCausalLM"};
  } else if (arch.model_type == "qwen3_next") {
    out["architectures"] = {"Qwen3NextForCausalLM"};
  } else {
    out["architectures"] = {"Qwen3_5MoeForCausalLM"};
  }
  out["vocab_size"] = arch.vocab_size;
  out["hidden_size"] = arch.hidden_size;
  out["intermediate_size"] = arch.intermediate_size;
  out["num_hidden_layers"] = arch.num_hidden_layers;
  out["num_attention_heads"] = arch.num_attention_heads;
  out["num_key_value_heads"] = arch.num_key_value_heads;
  out["head_dim"] = arch.head_dim;
  out["max_position_embeddings"] = arch.max_position_embeddings;
  out["rms_norm_eps"] = arch.rms_norm_eps;
  out["rope_theta"] = arch.rope_theta;
  out["attention_bias"] = arch.attention_bias;
  out["use_sliding_window"] = arch.sliding_window > 0;
  if (arch.sliding_window > 0) out["sliding_window"] = arch.sliding_window;
  if (arch.pad_token_id >= 0) out["pad_token_id"] = arch.pad_token_id;
  out["tie_word_embeddings"] = arch.tie_word_embeddings;
  out["hidden_act"] = arch.hidden_act;
  out["num_experts"] = arch.num_experts;
  out["num_experts_per_tok"] = arch.num_experts_per_tok;
  out["moe_intermediate_size"] = arch.moe_intermediate_size;
  out["decoder_sparse_step"] = arch.decoder_sparse_step;
  out["mlp_only_layers"] = arch.mlp_only_layers;
  out["norm_topk_prob"] = arch.norm_topk_prob;
  out["router_aux_loss_coef"] = arch.router_aux_loss_coef;
  out["torch_dtype"] = "float32";
  if (arch.bos_token_id >= 0) out["bos_token_id"] = arch.bos_token_id;
  if (arch.eos_token_id >= 0) out["eos_token_id"] = arch.eos_token_id;
  if (hybrid) {
    // transformers 5.x reads rope settings from rope_parameters; the top-level copies below are
    // what 4.x reads.
    out["rope_parameters"] = {{"rope_type", "default"},
                              {"rope_theta", arch.rope_theta},
                              {"partial_rotary_factor", arch.partial_rotary_factor}};
    if (arch.model_type != "qwen3_next") {
      // Qwen3.5 has no dense layers and always renormalises: these fields do not exist there.
      for (const char* absent :
           {"intermediate_size", "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"})
        out.erase(absent);
    }
    out["partial_rotary_factor"] = arch.partial_rotary_factor;
    out["shared_expert_intermediate_size"] = arch.shared_expert_intermediate_size;
    out["linear_num_key_heads"] = arch.linear_num_key_heads;
    out["linear_num_value_heads"] = arch.linear_num_value_heads;
    out["linear_key_head_dim"] = arch.linear_key_head_dim;
    out["linear_value_head_dim"] = arch.linear_value_head_dim;
    out["linear_conv_kernel_dim"] = arch.linear_conv_kernel_dim;
    json types = json::array();
    for (const auto type : arch.layer_types) {
      types.push_back(type == LayerMixer::full_attention ? "full_attention" : "linear_attention");
    }
    out["layer_types"] = types;
  }
  const RopeScalingFields& rope = arch.rope_scaling;
  if (rope.rope_type != "default") {
    json& parameters = out["rope_parameters"];
    if (!hybrid) parameters = {{"rope_theta", arch.rope_theta}};
    parameters["rope_type"] = rope.rope_type;
    parameters["factor"] = rope.factor;
    if (rope.rope_type == "yarn" || rope.rope_type == "llama3")
      parameters["original_max_position_embeddings"] =
          static_cast<std::int64_t>(rope.original_max_position_embeddings);
    if (rope.rope_type == "yarn") {
      parameters["beta_fast"] = rope.beta_fast;
      parameters["beta_slow"] = rope.beta_slow;
      parameters["truncate"] = rope.truncate;
      if (rope.attention_factor > 0.0) parameters["attention_factor"] = rope.attention_factor;
      if (rope.mscale != 0.0) parameters["mscale"] = rope.mscale;
      if (rope.mscale_all_dim != 0.0) parameters["mscale_all_dim"] = rope.mscale_all_dim;
    }
    if (rope.rope_type == "llama3") {
      parameters["low_freq_factor"] = rope.low_freq_factor;
      parameters["high_freq_factor"] = rope.high_freq_factor;
    }
  }
  return out.dump(2) + "\n";
}

}  // namespace dyncp::config
