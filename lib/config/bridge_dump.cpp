// The resolved configuration as a Megatron-Bridge ConfigContainer dump (`--print-config
// --format bridge`): every field of every section the newest Bridge release read
// (bridge_dump_release()) instantiates, keys sorted as
// yaml.safe_dump sorts them, `_target_` on each section and `{_target_, _call_}` objects for
// dtypes, enums and functions. Honoured fields carry this configuration's values, everything
// else Bridge's default (a refused field its first supported value). Settings of this program
// with no Bridge field are listed in the header comment. Read back by bridge_reader.cpp it gives
// the same configuration in every key Bridge can express.

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "config/bridge_fields.hpp"
#include "config/config_loader.hpp"
#include "config/hf_hub_cache.hpp"
#include "config/key_table.hpp"
#include "core/error.hpp"

namespace dyncp::config {

namespace {

struct SectionClass {
  std::string section;
  std::string class_name;
  std::string target;
};

std::string double_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A value in dump spelling (as the reader canonicalises it) -> YAML text at `indent`.
std::string yaml_of(const std::string& field, const std::string& value, const std::string& indent) {
  if (value.empty()) return " \"\"";
  if (value.rfind("torch.", 0) == 0 && value.find('.', 6) == std::string::npos) {
    return "\n" + indent + "_call_: false\n" + indent + "_target_: " + value;
  }
  if (field == "activation_func") {
    return "\n" + indent + "_call_: false\n" + indent + "_target_: torch.nn.functional." + value;
  }
  if (field == "attention_backend") {
    const std::vector<std::string> names = {"flash", "fused", "unfused", "local", "auto"};
    const auto at = std::find(names.begin(), names.end(), value);
    const auto number = at == names.end() ? 5 : (at - names.begin()) + 1;
    return "\n" + indent + "_args_:\n" + indent + "- " + std::to_string(number) + "\n" + indent +
           "_call_: true\n" + indent + "_name_: " + value + "\n" + indent +
           "_target_: megatron.core.transformer.enums.AttnBackend";
  }
  if (field == "exit_signal") {
    return "\n" + indent + "_args_:\n" + indent + "- 15\n" + indent + "_call_: true\n" + indent +
           "_name_: " + value + "\n" + indent + "_target_: signal.Signals";
  }
  return " " + value;
}

class BridgeWriter {
 public:
  explicit BridgeWriter(const ConfigContainer& config) : config_(config) {}

  std::string write() {
    const std::string dataset_class = config_.dataset.type == DatasetType::chat_jsonl
                                          ? "GPTSFTDatasetConfig"
                                          : "GPTDatasetConfig";
    honoured_values();
    const std::vector<SectionClass> sections = {
        {"checkpoint", "CheckpointConfig", "megatron.bridge.training.config.CheckpointConfig"},
        {"dataset", dataset_class,
         dataset_class == "GPTSFTDatasetConfig"
             ? "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig"
             : "megatron.bridge.training.config.GPTDatasetConfig"},
        {"ddp", "DistributedDataParallelConfig",
         "megatron.bridge.training.config.DistributedDataParallelConfig"},
        {"dist", "DistributedInitConfig", "megatron.bridge.training.config.DistributedInitConfig"},
        {"logger", "LoggerConfig", "megatron.bridge.training.config.LoggerConfig"},
        {"mixed_precision", "MixedPrecisionConfig",
         "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"},
        {"model", "GPTModelProvider", "megatron.bridge.models.gpt_provider.GPTModelProvider"},
        {"optimizer", "OptimizerConfig", "megatron.bridge.training.config.OptimizerConfig"},
        {"profiling", "ProfilingConfig", "megatron.bridge.training.config.ProfilingConfig"},
        {"rerun_state_machine", "RerunStateMachineConfig",
         "megatron.bridge.training.config.RerunStateMachineConfig"},
        {"rng", "RNGConfig", "megatron.training.config.common_config.RNGConfig"},
        {"scheduler", "SchedulerConfig", "megatron.bridge.training.config.SchedulerConfig"},
        {"tokenizer", "TokenizerConfig",
         "megatron.bridge.training.tokenizers.config.TokenizerConfig"},
        {"train", "TrainingConfig", "megatron.bridge.training.config.TrainingConfig"},
        {"validation", "ValidationConfig",
         "megatron.training.config.training_config.ValidationConfig"},
    };
    std::ostringstream body;
    body << "_target_: megatron.bridge.training.config.ConfigContainer\n";
    const std::set<std::string> absent = {"comm_overlap",   "ft",   "inprocess_restart",
                                          "nvrx_straggler", "peft", "straggler",
                                          "tensor_inspect"};
    std::map<std::string, std::string> top;
    for (const auto& section : sections) top[section.section] = write_section(section);
    for (const auto& name : absent) top[name] = " null\n";
    top["env_vars"] = " {}\n";
    top["optimizer_config_override_provider"] =
        "\n  _target_: megatron.bridge.training.config.OptimizerConfigOverrideProvider\n";
    for (const auto& [name, text] : top) body << name << ":" << text;
    return header() + body.str();
  }

 private:
  void set(const std::string& path, const KeyValue& value) { values_[path] = dump_text(value); }
  void set_text(const std::string& path, const std::string& text) { values_[path] = text; }

  static std::string dump_text(const KeyValue& value) {
    if (const auto* text = std::get_if<std::string>(&value)) {
      return text->empty() ? "null" : double_quoted(*text);
    }
    if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
      if (list->empty()) return "null";
      std::string out;
      for (const auto& item : *list) out += (out.empty() ? "" : ", ") + double_quoted(item);
      return "[" + out + "]";
    }
    return format_value(value);
  }

  // Fills values_ (Bridge path -> YAML text) from the configuration.
  void honoured_values() {
    for (const auto& rule : bridge_rules()) {
      if (rule.kind != BridgeFieldClass::honoured || rule.target == "special") continue;
      const KeySpec* spec = find_key(rule.target);
      const auto value = spec->get(config_);
      // Choices are bare words in Bridge's dumps (a Literal field), not quoted strings.
      if (spec->type == KeyType::choice && std::holds_alternative<std::string>(value)) {
        set_text(rule.pattern, std::get<std::string>(value));
      } else {
        set(rule.pattern, value);
      }
      used_keys_.insert(spec->path);
    }
    const auto& model = config_.model;
    const auto& arch = model.architecture;
    const bool hybrid = arch.is_hybrid();
    auto integer = [](std::int64_t value) { return std::to_string(value); };
    auto boolean = [](bool value) { return std::string(value ? "true" : "false"); };
    set_text("model.experimental_attention_variant", hybrid ? "gated_delta_net" : "null");
    set_text("model.layernorm_zero_centered_gamma", boolean(hybrid));
    set_text("model.attention_output_gate", boolean(hybrid));
    set_text("model.moe_shared_expert_gate",
             boolean(hybrid && arch.shared_expert_intermediate_size > 0));
    set_text("model.hf_model_id",
             model.hf_model_path.empty() ? "null" : double_quoted(local_path(model.hf_model_path)));
    set_text("model.vocab_size", integer(arch.vocab_size));
    set_text("model.ffn_hidden_size", integer(arch.intermediate_size));
    set_text("model.num_query_groups", integer(arch.num_key_value_heads));
    set_text("model.kv_channels", arch.head_dim == 0 ? "null" : integer(arch.head_dim));
    set_text("model.num_moe_experts", arch.num_experts == 0 ? "null" : integer(arch.num_experts));
    set_text("model.moe_ffn_hidden_size", integer(arch.moe_intermediate_size));
    set_text("model.moe_shared_expert_intermediate_size",
             arch.shared_expert_intermediate_size == 0
                 ? "null"
                 : integer(arch.shared_expert_intermediate_size));
    set_text("model.moe_router_pre_softmax", boolean(!arch.norm_topk_prob));
    bool every_layer_moe = true;
    std::string layer_flags;
    for (std::int64_t layer = 0; layer < arch.num_hidden_layers; ++layer) {
      const bool moe = arch.is_moe_layer(layer);
      every_layer_moe = every_layer_moe && moe;
      layer_flags += (layer_flags.empty() ? "" : ", ") + std::string(moe ? "1" : "0");
    }
    set_text("model.moe_layer_freq",
             every_layer_moe || arch.num_experts == 0 ? "1" : "[" + layer_flags + "]");
    if (hybrid) {
      std::string mixers;
      for (std::int64_t layer = 0; layer < arch.num_hidden_layers; ++layer) {
        mixers +=
            (mixers.empty() ? "" : ", ") +
            std::string(arch.mixer_of_layer(layer) == LayerMixer::linear_attention ? "1" : "0");
      }
      set_text("model.linear_attention_freq", "[" + mixers + "]");
      set_text("model.transformer_layer_spec",
               "\n    _call_: false\n    _target_: megatron.core.models.gpt."
               "experimental_attention_variant_module_specs."
               "get_transformer_block_with_experimental_attention_variant_spec");
    } else {
      set_text("model.linear_attention_freq", "null");
    }
    set_text("model.cp_comm_type", to_string(model.cp_comm_type));
    {
      std::string sizes;
      for (const std::int64_t size : model.hierarchical_context_parallel_sizes)
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
      set_text("model.hierarchical_context_parallel_sizes",
               model.hierarchical_context_parallel_sizes.empty() ? "null" : "[" + sizes + "]");
    }
    set_text("model.recompute_modules", dump_text(to_names(model.recompute_modules)));
    set_text("optimizer.exp_avg_dtype", "torch." + to_string(config_.optimizer.exp_avg_dtype));
    set_text("optimizer.exp_avg_sq_dtype",
             "torch." + to_string(config_.optimizer.exp_avg_sq_dtype));
    const bool bf16 = config_.mixed_precision == MixedPrecision::bf16_mixed;
    set_text("mixed_precision.bf16", boolean(bf16));
    set_text("mixed_precision.fp32", boolean(!bf16));
    set_text("tokenizer.tokenizer_type", to_string(config_.tokenizer.tokenizer_type));
    set_text("tokenizer.tokenizer_model",
             config_.tokenizer.tokenizer_model.empty()
                 ? "null"
                 : double_quoted(local_path(config_.tokenizer.tokenizer_model)));
    set_text("dataset.dataloader_type", to_string(config_.dataset.dataloader_type));
    set_text("dataset.path_to_cache", double_quoted(config_.dataset.cache_dir));
    // The reader tells the family from experimental_attention_variant and Qwen3.5 from the
    // checkpoint's name; a model type it would not infer stays listed in the header.
    const bool named_qwen35 = model.hf_model_path.find("Qwen3.5") != std::string::npos ||
                              model.hf_model_path.find("Qwen3_5") != std::string::npos ||
                              model.hf_model_path.find("Qwen35") != std::string::npos;
    const std::string inferred =
        hybrid ? (named_qwen35 ? "qwen3_5_moe_text" : "qwen3_next") : "qwen3_moe";
    if (inferred == arch.model_type) used_keys_.insert("model.model_type");
    used_keys_.insert({"model.hf_model_path",
                       "model.vocab_size",
                       "model.intermediate_size",
                       "model.num_key_value_heads",
                       "model.head_dim",
                       "model.num_experts",
                       "model.moe_intermediate_size",
                       "model.shared_expert_intermediate_size",
                       "model.norm_topk_prob",
                       "model.decoder_sparse_step",
                       "model.mlp_only_layers",
                       "model.layer_types",
                       "model.full_attention_interval",
                       "model.cp_comm_type",
                       "model.hierarchical_context_parallel_sizes",
                       "model.recompute_modules",
                       "optimizer.exp_avg_dtype",
                       "optimizer.exp_avg_sq_dtype",
                       "mixed_precision",
                       "tokenizer.tokenizer_type",
                       "tokenizer.tokenizer_model",
                       "dataset.dataloader_type",
                       "dataset.cache_dir",
                       "dataset.type",
                       "dataset.data_path",
                       "dataset.mock_length_distribution",
                       "dataset.validation_data_path"});
    dataset_values();
  }

  // A local folder whose name reads like Org/Name would be looked up in the HF cache: "./" keeps
  // it local.
  static std::string local_path(const std::string& path) {
    return is_hub_name(path) ? "./" + path : path;
  }

  static std::vector<std::string> to_names(const std::vector<std::string>& names) { return names; }

  void dataset_values() {
    const auto& dataset = config_.dataset;
    const std::int64_t seq_length = dataset.seq_length.value_or(config_.model.seq_length);
    switch (dataset.type) {
      case DatasetType::mock_varlen:
        if (dataset.mock_length_distribution !=
            "fixed(length=" + std::to_string(seq_length) + ")") {
          core::throw_config_error("dataset.mock_length_distribution",
                                   dataset.mock_length_distribution +
                                       ": Bridge's mock data has samples of exactly seq_length "
                                       "tokens; only fixed(length=" +
                                       std::to_string(seq_length) +
                                       ") can be written as a Bridge dump");
        }
        set_text("dataset.mock", "true");
        set_text("dataset.blend", "null");
        set_text("dataset.data_path", "null");
        break;
      case DatasetType::megatron_indexed:
        set_text("dataset.blend", "null");
        set_text("dataset.data_path", double_quoted(dataset.data_path));
        set_text("dataset.split", "\"100,0,0\"");
        set_text("dataset.mock", "false");
        break;
      case DatasetType::chat_jsonl: {
        const std::filesystem::path data(dataset.data_path);
        if (data.filename() != "training.jsonl") {
          core::throw_config_error("dataset.data_path",
                                   dataset.data_path +
                                       ": Bridge's GPTSFTDatasetConfig reads <dataset_root>/"
                                       "training.jsonl; name the file training.jsonl to write a "
                                       "Bridge dump");
        }
        set_text("dataset.dataset_root", double_quoted(data.parent_path().string()));
        const auto validation = (data.parent_path() / "validation.jsonl").string();
        if (!dataset.validation_data_path.empty() && dataset.validation_data_path != validation) {
          core::throw_config_error("dataset.validation_data_path",
                                   dataset.validation_data_path +
                                       ": Bridge's GPTSFTDatasetConfig reads <dataset_root>/"
                                       "validation.jsonl (" +
                                       validation + ")");
        }
        set_text("dataset.do_validation", dataset.validation_data_path.empty() ? "false" : "true");
        set_text("dataset.preprocessing",
                 "\n    _target_: megatron.bridge.data.sft_processing.ChatSFTPreprocessingConfig\n"
                 "    loss_mode: assistant");
        break;
      }
      case DatasetType::token_jsonl:
        core::throw_config_error("dataset.type",
                                 "token_jsonl: Bridge has no dataset class for token-id JSONL; "
                                 "only mock_varlen, megatron_indexed and chat_jsonl can be "
                                 "written as a Bridge dump");
    }
  }

  // The fields of the newest numbered release (the one a user can install to read the dump)
  // and the dynamic-CP fields no release has yet.
  static bool is_dump_field(const BridgeField& field) {
    return field.in_release(bridge_dump_release()) || field.in_release(bridge_dynamic_cp_label);
  }

  std::string write_section(const SectionClass& section) {
    std::map<std::string, std::string> lines;
    for (const auto& field : bridge_fields()) {
      if (field.section != section.section || field.class_name != section.class_name) continue;
      if (!is_dump_field(field)) continue;
      const std::string path = field.path();
      if (section.section == "dataset" && field.name == "sequence_length") continue;
      std::string value;
      if (const auto found = values_.find(path); found != values_.end()) {
        value = found->second;
      } else {
        const BridgeRule* rule = classify_bridge_field(path);
        std::string fallback(field.default_value);
        if (rule != nullptr && rule->kind == BridgeFieldClass::refused && !rule->accepted.empty()) {
          fallback = rule->accepted.front();
        }
        if (fallback.front() == '<') continue;  // Bridge computes it; leave it to the loader
        value = fallback;
      }
      const std::string name(field.name);
      lines[name] = value.front() == '\n' ? value : yaml_of(name, value, "    ");
    }
    std::string out = "\n  _target_: " + section.target + "\n";
    for (const auto& [name, value] : lines) out += "  " + name + ":" + value + "\n";
    return out;
  }

  // This program's settings that have no Bridge field, when they differ from the defaults.
  std::string header() const {
    const ConfigContainer defaults;
    std::string out =
        "# Megatron-Bridge ConfigContainer dump (dyncp-train --print-config --format bridge).\n";
    std::string unexpressed;
    for (const auto& spec : key_table()) {
      if (used_keys_.count(spec.path) > 0) continue;
      const auto value = spec.get(config_);
      if (value == spec.get(defaults)) continue;
      if (spec.path.rfind("model.", 0) == 0 && find_honoured_alias(spec.path)) continue;
      unexpressed += "#   " + spec.path + ": " + format_value(value) + "\n";
    }
    if (!unexpressed.empty()) {
      out += "# Settings with no Bridge field (not in this dump):\n" + unexpressed;
    }
    return out;
  }

  bool find_honoured_alias(const std::string& path) const { return used_keys_.count(path) > 0; }

  const ConfigContainer& config_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_keys_;
};

}  // namespace

std::string dump_bridge_yaml(const ConfigContainer& config) {
  return BridgeWriter(config).write();
}

}  // namespace dyncp::config
