// A Megatron-Bridge ConfigContainer dump (as `ConfigContainer.to_yaml` writes it) -> the flat
// assignments of this program's keys. Every field is looked up in the classification table
// (bridge_rules.cpp): honoured fields become assignments, inert ones are collected for the
// start-up warning when they differ from Bridge's default, refused ones are problems unless they
// hold a supported value. `_target_` names the class of each section (the model provider and the
// dataset kind come from it) and `{_target_, _call_}` objects (dtypes, enums, functions) are read
// as their values.

#include "config/bridge_reader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "config/assignment.hpp"
#include "config/bridge_fields.hpp"
#include "config/hf_hub_cache.hpp"
#include "config/model_architecture.hpp"
#include "core/error.hpp"

namespace dyncp::config::detail {

namespace {

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

std::string last_component(const std::string& dotted) {
  const auto dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

bool is_object(const YAML::Node& node) {
  return node.IsMap() && node["_target_"] &&
         (node["_call_"] || node["_name_"] || node["_args_"] || node["_partial_"]);
}

bool is_dataclass(const YAML::Node& node) {
  return node.IsMap() && node["_target_"] && !is_object(node);
}

// The value of a `{_target_, _call_}` object as a dump's reader means it: an enum's name, a dtype
// as torch.NAME, a function by its own name.
std::string object_value(const YAML::Node& node) {
  if (node["_name_"] && node["_name_"].IsScalar()) return node["_name_"].Scalar();
  const std::string target = node["_target_"].Scalar();
  if (target.rfind("torch.", 0) == 0 && target.find('.', 6) == std::string::npos) return target;
  return last_component(target);
}

// The canonical text of a value, for comparisons with defaults and accepted lists.
std::string canonical(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Scalar:
      return node.Tag() == "!" ? node.Scalar() : canonical_bridge_value(node.Scalar());
    case YAML::NodeType::Sequence: {
      std::string out;
      for (const auto& item : node) out += (out.empty() ? "" : ", ") + canonical(item);
      return "[" + out + "]";
    }
    case YAML::NodeType::Map:
      if (is_object(node)) return object_value(node);
      if (is_dataclass(node)) return last_component(node["_target_"].Scalar());
      return node.size() == 0 ? "{}" : "{...}";
  }
  return "?";
}

RawValue to_raw(const YAML::Node& node) {
  RawValue raw;
  if (node.IsNull() || !node.IsDefined()) return raw;
  if (node.IsSequence()) {
    raw.kind = RawValue::Kind::list;
    for (const auto& item : node) raw.items.push_back(to_raw(item));
    return raw;
  }
  raw.kind = RawValue::Kind::scalar;
  if (node.IsMap()) {
    raw.text = canonical(node);
  } else {
    raw.text = node.Scalar();
    raw.quoted = node.Tag() == "!";
  }
  return raw;
}

RawValue scalar(const std::string& text) {
  return {RawValue::Kind::scalar, text, false, {}};
}

// Model providers this program builds: Bridge's generic provider (AutoBridge from a Qwen
// checkpoint) and the Qwen-specific providers of earlier Bridge releases.
bool is_supported_provider(const std::string& name) {
  return name == "GPTModelProvider" || name.rfind("Qwen3MoEModelProvider", 0) == 0 ||
         name.rfind("Qwen3NextModelProvider", 0) == 0 || name.rfind("Qwen35", 0) == 0;
}

enum class DatasetKind { unknown, pretrain, sft };

DatasetKind dataset_kind(const std::string& name) {
  if (name == "GPTDatasetConfig" || name == "MockGPTDatasetConfig") return DatasetKind::pretrain;
  if (name == "GPTSFTDatasetConfig" || name == "FinetuningDatasetConfig") return DatasetKind::sft;
  return DatasetKind::unknown;
}

struct Entry {
  YAML::Node value;
  std::string origin;
};

class BridgeReader {
 public:
  BridgeReader(const std::string& source, ProblemList& problems,
               std::vector<std::string>& inert_settings)
      : source_(source), problems_(problems), inert_settings_(inert_settings) {}

  std::vector<Assignment> read(const YAML::Node& root) {
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      const YAML::Node& value = entry.second;
      const std::string where = location(source_, entry.first.Mark());
      if (key == "_target_") {
        if (last_component(value.Scalar()) != "ConfigContainer") {
          problems_.add("_target_ (" + where + ")", value.Scalar(),
                        "not a Megatron-Bridge ConfigContainer dump");
        }
        continue;
      }
      read_section(key, value, where);
    }
    finish();
    return std::move(out_);
  }

 private:
  void assign(const std::string& path, RawValue value, const std::string& origin) {
    out_.push_back({path, std::move(value), origin});
  }

  void refuse(const std::string& path, const std::string& origin, const std::string& value,
              const std::string& rule) {
    problems_.add(path + " (" + origin + ")", value, rule);
  }

  void read_section(const std::string& section, const YAML::Node& value, const std::string& where) {
    if (section == "env_vars" || section == "optimizer_config_override_provider") {
      // Launch environment and a parameter-group hook with no fields: infrastructure.
      if (section == "env_vars" && value.IsMap() && value.size() > 0) {
        inert_settings_.push_back("env_vars (" + std::to_string(value.size()) + " variables)");
      }
      return;
    }
    if (section == "mixed_precision" && value.IsScalar()) {
      const std::string recipe = value.Scalar();
      if (recipe == "bf16_mixed" || recipe == "fp32") {
        assign("mixed_precision", scalar(recipe), where);
      } else {
        refuse("mixed_precision", where, recipe,
               "this precision recipe is not built (fp16 / FP8 / FP4); supported: bf16_mixed, "
               "fp32");
      }
      return;
    }
    if (!is_known_section(section)) {
      problems_.add_line(section + " (" + where + "): unknown ConfigContainer section" +
                         did_you_mean(section, section_names()));
      return;
    }
    if (value.IsNull()) {
      if (section == "model" || section == "dataset") {
        refuse(section, where, "null", "the dump needs its " + section + " section");
      }
      return;
    }
    if (!value.IsMap()) {
      refuse(section, where, canonical(value), "expected a mapping (a ConfigContainer section)");
      return;
    }
    const std::string class_name =
        value["_target_"] ? last_component(value["_target_"].Scalar()) : std::string();
    if (section == "peft") {
      refuse("peft", where, class_name.empty() ? "{...}" : class_name,
             "PEFT (LoRA / DoRA adapters) is not built; supported: null (full fine-tuning)");
      return;
    }
    if (!check_section_class(section, class_name, where)) return;
    section_class_[section] = class_name;
    read_fields(section, value);
  }

  bool check_section_class(const std::string& section, const std::string& class_name,
                           const std::string& where) {
    if (class_name.empty()) return true;
    if (section == "model") {
      if (!is_supported_provider(class_name)) {
        refuse("model._target_", where, class_name,
               "this model provider is not built; supported: GPTModelProvider of a Qwen3-MoE, "
               "Qwen3-Next or Qwen3.5 checkpoint (AutoBridge), Qwen3MoEModelProvider*, "
               "Qwen3NextModelProvider*");
        return false;
      }
      return true;
    }
    if (section == "dataset") {
      dataset_kind_ = dataset_kind(class_name);
      if (dataset_kind_ == DatasetKind::unknown) {
        refuse("dataset._target_", where, class_name,
               "this dataset class is not built; supported: GPTDatasetConfig, "
               "MockGPTDatasetConfig (pretraining data), GPTSFTDatasetConfig, "
               "FinetuningDatasetConfig (chat JSONL)");
        return false;
      }
      return true;
    }
    for (const auto& field : bridge_fields()) {
      if (field.section == section && field.class_name == class_name) return true;
    }
    refuse(section + "._target_", where, class_name,
           "unknown class for this section (a Bridge release this program does not know)");
    return false;
  }

  void read_fields(const std::string& section, const YAML::Node& map) {
    for (const auto& entry : map) {
      const std::string key = entry.first.Scalar();
      if (key == "_target_") continue;
      const std::string path = section + "." + key;
      const std::string where = location(source_, entry.first.Mark());
      const YAML::Node& value = entry.second;
      if (find_bridge_field(path) == nullptr) {
        problems_.add_line(path + " (" + where + "): unknown key (a field of no Megatron-Bridge " +
                           "release known here: " + release_labels() + ")" +
                           did_you_mean(path, field_paths(section)));
        continue;
      }
      const BridgeRule* rule = classify_bridge_field(path);
      if (rule == nullptr) {
        problems_.add_line(path + " (" + where + "): a Bridge field with no classification");
        continue;
      }
      switch (rule->kind) {
        case BridgeFieldClass::honoured:
          special_[path] = {value, where};  // translations read other fields too
          if (rule->target != "special") assign(rule->target, to_raw(value), where);
          break;
        case BridgeFieldClass::inert:
          note_inert(path, value);
          if (is_dataclass(value) && has_nested_fields(path)) read_fields(path, value);
          break;
        case BridgeFieldClass::refused:
          check_refused(*rule, path, value, where);
          break;
      }
    }
  }

  std::string class_of(const std::string& path) const {
    const auto found = section_class_.find(path.substr(0, path.find('.')));
    return found == section_class_.end() ? std::string() : found->second;
  }

  // Listed when the value is the default of no release (a dump does not say which release
  // wrote it).
  void note_inert(const std::string& path, const YAML::Node& value) {
    const std::string actual = canonical(value);
    bool literal = false;
    for (const auto& default_value : bridge_field_defaults(path, class_of(path))) {
      if (default_value.front() == '<') continue;  // no literal default to compare with
      literal = true;
      if (actual == canonical_bridge_value(default_value)) return;
    }
    if (literal) inert_settings_.push_back(path + "=" + actual);
  }

  void check_refused(const BridgeRule& rule, const std::string& path, const YAML::Node& value,
                     const std::string& where) {
    const std::string actual = canonical(value);
    std::string supported;
    for (const auto& accepted : bridge_accepted_values(rule, path, class_of(path))) {
      if (canonical_bridge_value(accepted) == actual) return;
      supported += (supported.empty() ? "" : " or ") + accepted;
    }
    refuse(path, where, actual, rule.note + " is not built; supported: " + supported);
  }

  // --- honoured fields that need more than a rename -------------------------------------------

  const Entry* special(const std::string& path) const {
    const auto found = special_.find(path);
    return found == special_.end() ? nullptr : &found->second;
  }
  bool is_null(const std::string& path) const {
    const auto* entry = special(path);
    return entry == nullptr || entry->value.IsNull();
  }
  std::string text(const std::string& path) const {
    const auto* entry = special(path);
    return entry == nullptr ? std::string("null") : canonical(entry->value);
  }

  // Assign `target` from `path` unless the value is null.
  void copy_unless_null(const std::string& path, const std::string& target) {
    if (const auto* entry = special(path); entry != nullptr && !entry->value.IsNull()) {
      assign(target, to_raw(entry->value), entry->origin);
    }
  }

  void finish() {
    // ConfigContainer.validate copies TrainingConfig's deprecated validation fields over
    // ValidationConfig's when they are set.
    for (const char* name : {"eval_iters", "eval_interval"}) {
      const auto* entry = special(std::string("train.") + name);
      if (entry == nullptr || entry->value.IsNull()) continue;
      const std::string target = std::string("validation.") + name;
      std::erase_if(out_, [&](const Assignment& done) { return done.path == target; });
      assign(target, to_raw(entry->value), entry->origin);
    }
    finish_model();
    finish_data();
    finish_precision();
    for (const char* path : {"optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype"}) {
      if (const auto* entry = special(path)) {
        const std::string dtype = canonical(entry->value);
        if (dtype == "torch.float32" || dtype == "torch.bfloat16") {
          assign(path, scalar(dtype.substr(6)), entry->origin);
        } else {
          refuse(path, entry->origin, dtype,
                 "this optimizer-state dtype is not built; supported: torch.float32 or "
                 "torch.bfloat16");
        }
      }
    }
  }

  std::string resolve_hub(const std::string& path, const std::string& name,
                          const std::string& revision, const std::string& origin) {
    // "./Org/Name" is how a local folder that looks like a hub name is written (bridge_dump.cpp).
    if (name.rfind("./", 0) == 0 && is_hub_name(name.substr(2))) return name.substr(2);
    if (!is_hub_name(name)) return name;
    const auto lookup = find_in_hf_cache(name, revision);
    if (lookup.snapshot) return *lookup.snapshot;
    refuse(path, origin, name, hub_not_found_message(name, lookup));
    return "";
  }

  void finish_model() {
    const std::string variant = text("model.experimental_attention_variant");
    const bool hybrid = variant == "gated_delta_net";
    std::string hf_model_id = is_null("model.hf_model_id") ? "" : text("model.hf_model_id");
    if (variant != "null" && !hybrid) {
      refuse("model.experimental_attention_variant",
             special("model.experimental_attention_variant")->origin, variant,
             "this attention variant (DeepSeek sparse attention) is not built; supported: null "
             "(Qwen3-MoE) or gated_delta_net (Qwen3-Next / Qwen3.5)");
    }
    // The checkpoint's config.json names the family exactly; without one, Qwen3.5 is told from
    // the name and any other hybrid is Qwen3-Next.
    std::string checkpoint_type;
    if (!hf_model_id.empty()) {
      const std::string revision =
          is_null("model.hf_model_revision") ? "" : text("model.hf_model_revision");
      const auto* entry = special("model.hf_model_id");
      const auto folder = resolve_hub("model.hf_model_id", hf_model_id, revision, entry->origin);
      if (!folder.empty()) {
        assign("model.hf_model_path", scalar(folder), entry->origin);
        try {
          checkpoint_type = load_hf_model_config(folder).model_type;
        } catch (const core::Error&) {
          // The loader reports an unreadable config.json for model.hf_model_path.
        }
      }
    }
    if (special("model.experimental_attention_variant") != nullptr) {
      const bool qwen35 = hf_model_id.find("Qwen3.5") != std::string::npos ||
                          hf_model_id.find("Qwen3_5") != std::string::npos ||
                          hf_model_id.find("Qwen35") != std::string::npos;
      std::string model_type = hybrid ? (qwen35 ? "qwen3_5_moe_text" : "qwen3_next") : "qwen3_moe";
      if (!checkpoint_type.empty()) {
        const bool checkpoint_hybrid = checkpoint_type != "qwen3_moe";
        if (checkpoint_hybrid != hybrid) {
          refuse("model.experimental_attention_variant",
                 special("model.experimental_attention_variant")->origin, variant,
                 "contradicts the checkpoint's model_type " + checkpoint_type +
                     " (gated_delta_net for qwen3_next / qwen3_5_moe, null for qwen3_moe)");
        }
        model_type = checkpoint_type;
      }
      assign("model.model_type", scalar(model_type), source_);
    }
    check_family_flag("model.layernorm_zero_centered_gamma", hybrid);
    check_family_flag("model.attention_output_gate", hybrid);
    const bool shared_expert = !is_null("model.moe_shared_expert_intermediate_size") &&
                               text("model.moe_shared_expert_intermediate_size") != "0";
    check_family_flag("model.moe_shared_expert_gate", hybrid && shared_expert);

    copy_unless_null("model.cp_comm_type", "model.cp_comm_type");
    copy_unless_null("model.hierarchical_context_parallel_sizes",
                     "model.hierarchical_context_parallel_sizes");
    copy_unless_null("model.recompute_modules", "model.recompute_modules");
    copy_unless_null("model.vocab_size", "model.vocab_size");
    copy_unless_null("model.kv_channels", "model.head_dim");
    copy_or_derive("model.num_query_groups", "model.num_key_value_heads",
                   text("model.num_attention_heads"));
    std::string ffn = text("model.ffn_hidden_size");
    if (ffn == "null" && text("model.hidden_size") != "null") {
      ffn = std::to_string(4 * std::stoll(text("model.hidden_size")));
    }
    copy_or_derive("model.ffn_hidden_size", "model.intermediate_size", ffn);
    copy_or_derive("model.num_moe_experts", "model.num_experts", "0");
    copy_or_derive("model.moe_ffn_hidden_size", "model.moe_intermediate_size", ffn);
    copy_or_derive("model.moe_shared_expert_intermediate_size",
                   "model.shared_expert_intermediate_size", "0");
    if (const auto* entry = special("model.moe_router_pre_softmax")) {
      const std::string value = canonical(entry->value);
      if (value == "true" || value == "false") {
        assign("model.norm_topk_prob", scalar(value == "true" ? "false" : "true"), entry->origin);
      } else {
        refuse("model.moe_router_pre_softmax", entry->origin, value, "expected true or false");
      }
    }
    if (const auto* entry = special("model.moe_router_load_balancing_type")) {
      const std::string value = canonical(entry->value);
      if (value == "aux_loss" || value == "none") {
        assign("model.moe_router_load_balancing_type", scalar(value), entry->origin);
      } else {
        refuse("model.moe_router_load_balancing_type", entry->origin, value,
               "this load-balancing loss is not built; supported: aux_loss (computed per "
               "sequence over the global batch, ops/moe_aux_loss.hpp) or none");
      }
    }
    read_layer_frequency();
    read_linear_attention_frequency(hybrid);
  }

  void copy_or_derive(const std::string& path, const std::string& target,
                      const std::string& when_null) {
    const auto* entry = special(path);
    if (entry == nullptr) return;
    if (!entry->value.IsNull()) {
      assign(target, to_raw(entry->value), entry->origin);
    } else if (when_null != "null") {
      assign(target, scalar(when_null), entry->origin);
    }
  }

  void check_family_flag(const std::string& path, bool expected) {
    const auto* entry = special(path);
    if (entry == nullptr) return;
    const std::string value = canonical(entry->value);
    const std::string wanted = expected ? "true" : "false";
    if (value != wanted) {
      refuse(path, entry->origin, value,
             "this model family needs " + wanted +
                 " (Qwen3-Next / Qwen3.5 hybrids use zero-centred norms, gated attention and a "
                 "gated shared expert; Qwen3-MoE none of them)");
    }
  }

  void read_layer_frequency() {
    const auto* entry = special("model.moe_layer_freq");
    if (entry == nullptr) return;
    const YAML::Node& value = entry->value;
    if (value.IsScalar() && canonical(value) == "1") return;  // every layer is MoE
    if (value.IsSequence()) {
      RawValue dense_layers{RawValue::Kind::list, "", false, {}};
      bool valid = true;
      for (std::size_t layer = 0; layer < value.size(); ++layer) {
        const std::string flag = canonical(value[layer]);
        if (flag == "0") {
          dense_layers.items.push_back(scalar(std::to_string(layer)));
        } else if (flag != "1") {
          valid = false;
        }
      }
      if (valid) {
        assign("model.mlp_only_layers", std::move(dense_layers), entry->origin);
        return;
      }
    }
    refuse("model.moe_layer_freq", entry->origin, canonical(value),
           "an MoE layer every k > 1 layers is not built; supported: 1 or a 0/1 list (one "
           "entry per layer, 0 = dense MLP)");
  }

  void read_linear_attention_frequency(bool hybrid) {
    const auto* entry = special("model.linear_attention_freq");
    if (entry == nullptr || entry->value.IsNull()) return;
    if (!hybrid) {
      refuse("model.linear_attention_freq", entry->origin, canonical(entry->value),
             "linear attention needs experimental_attention_variant=gated_delta_net");
      return;
    }
    if (entry->value.IsSequence()) {
      RawValue layer_types{RawValue::Kind::list, "", false, {}};
      for (const auto& flag : entry->value) {
        layer_types.items.push_back(
            scalar(canonical(flag) == "1" ? "linear_attention" : "full_attention"));
      }
      assign("model.layer_types", std::move(layer_types), entry->origin);
    } else {
      assign("model.full_attention_interval", to_raw(entry->value), entry->origin);
    }
  }

  // Bridge before 0.6 dumps GPTDatasetConfig's length as MCore's sequence_length (seq_length
  // was a property then); later releases dump seq_length and leave sequence_length out.
  void read_dataset_sequence_length() {
    const auto* old = special("dataset.sequence_length");
    if (old == nullptr || old->value.IsNull()) return;
    const auto* current = special("dataset.seq_length");
    if (current == nullptr || current->value.IsNull()) {
      assign("dataset.seq_length", to_raw(old->value), old->origin);
      special_["dataset.seq_length"] = *old;
    } else if (canonical(current->value) != canonical(old->value)) {
      refuse("dataset.sequence_length", old->origin, canonical(old->value),
             "contradicts dataset.seq_length (" + canonical(current->value) +
                 "): both are the dataset's sequence length; give one value");
    }
  }

  // The SFT dataset's constructor arguments: those that only pad samples (there is no padding
  // in global-batch packing), name caches or pick kernels change nothing here; the others
  // (min_seq_length, seed, special_tokens, answer_only_loss, ...) change the samples or the
  // loss.
  void read_dataset_kwargs() {
    const auto* kwargs = special("dataset.dataset_kwargs");
    if (kwargs == nullptr || kwargs->value.IsNull()) return;
    static const std::set<std::string> no_effect = {
        "pad_to_max_length",   "pad_seq_length_to_mult", "ceil_to_power_2",
        "index_mapping_dir",   "memmap_workers",         "get_attention_mask_from_fusion",
        "output_original_text"};
    std::string names;
    for (const auto& name : no_effect) names += (names.empty() ? "" : ", ") + name;
    if (!kwargs->value.IsMap()) {
      refuse("dataset.dataset_kwargs", kwargs->origin, canonical(kwargs->value),
             "expected a mapping of dataset arguments");
      return;
    }
    for (const auto& argument : kwargs->value) {
      const std::string name = argument.first.Scalar();
      const std::string value = canonical(argument.second);
      if (no_effect.count(name) > 0) {
        inert_settings_.push_back("dataset.dataset_kwargs." + name + "=" + value);
      } else {
        refuse("dataset.dataset_kwargs." + name, kwargs->origin, value,
               "this SFT dataset argument changes the samples or the loss and is not built; "
               "supported: the padding, cache and kernel arguments (" +
                   names + ")");
      }
    }
  }

  void finish_data() {
    read_dataset_sequence_length();
    read_dataset_kwargs();
    copy_unless_null("dataset.dataloader_type", "dataset.dataloader_type");
    copy_unless_null("dataset.path_to_cache", "dataset.cache_dir");
    if (const auto* entry = special("tokenizer.tokenizer_type")) {
      if (!entry->value.IsNull())
        assign("tokenizer.tokenizer_type", to_raw(entry->value), entry->origin);
    }
    std::string tokenizer_revision;
    if (const auto* kwargs = special("tokenizer.hf_tokenizer_kwargs");
        kwargs != nullptr && kwargs->value.IsMap()) {
      for (const auto& argument : kwargs->value) {
        if (argument.first.Scalar() == "revision") {
          tokenizer_revision = canonical(argument.second);
        } else {
          inert_settings_.push_back("tokenizer.hf_tokenizer_kwargs." + argument.first.Scalar() +
                                    "=" + canonical(argument.second));
        }
      }
    }
    if (const auto* entry = special("tokenizer.tokenizer_model");
        entry != nullptr && !entry->value.IsNull()) {
      const auto folder = resolve_hub("tokenizer.tokenizer_model", canonical(entry->value),
                                      tokenizer_revision, entry->origin);
      if (!folder.empty()) assign("tokenizer.tokenizer_model", scalar(folder), entry->origin);
    }
    if (dataset_kind_ == DatasetKind::pretrain) finish_pretraining_data();
    if (dataset_kind_ == DatasetKind::sft) finish_sft_data();
  }

  void finish_pretraining_data() {
    std::vector<std::string> prefixes;
    std::string origin = source_;
    if (const auto* entry = special("dataset.blend"); entry != nullptr && !entry->value.IsNull()) {
      origin = entry->origin;
      const YAML::Node& blend = entry->value;
      if (blend.IsSequence() && blend.size() >= 1 && blend[0].IsSequence()) {
        for (const auto& prefix : blend[0]) prefixes.push_back(prefix.Scalar());
      } else {
        prefixes.push_back(canonical(blend));
      }
    }
    if (const auto* entry = special("dataset.data_path");
        entry != nullptr && !entry->value.IsNull()) {
      origin = entry->origin;
      if (entry->value.IsSequence()) {
        for (const auto& prefix : entry->value) prefixes.push_back(prefix.Scalar());
      } else {
        prefixes.push_back(entry->value.Scalar());
      }
    }
    const bool mock = text("dataset.mock") == "true" || prefixes.empty();
    if (mock) {
      assign("dataset.type", scalar("mock_varlen"), origin);
      const std::string length = text("dataset.seq_length") != "null" ? text("dataset.seq_length")
                                                                      : text("model.seq_length");
      if (length != "null") {
        assign("dataset.mock_length_distribution", scalar("fixed(length=" + length + ")"), origin);
      }
      return;
    }
    if (prefixes.size() > 1) {
      refuse("dataset.blend", origin, std::to_string(prefixes.size()) + " prefixes",
             "blended datasets are not built; supported: one .bin/.idx prefix");
      return;
    }
    assign("dataset.type", scalar("megatron_indexed"), origin);
    assign("dataset.data_path", scalar(prefixes.front()), origin);
    const std::string split = text("dataset.split");
    if (split != "null" && split != "100,0,0" && split != "1,0,0" && split != "100") {
      refuse("dataset.split", special("dataset.split")->origin, split,
             "a train/validation/test split of one dataset is not built; supported: null or "
             "100,0,0 (held-out data comes from its own file)");
    }
  }

  void finish_sft_data() {
    const auto* root = special("dataset.dataset_root");
    if (root == nullptr || root->value.IsNull()) {
      refuse("dataset.dataset_root", root == nullptr ? source_ : root->origin, "null",
             "SFT data must be a local folder with training.jsonl (chat messages); Hub "
             "datasets are not downloaded");
    } else {
      const std::string folder = root->value.Scalar();
      assign("dataset.type", scalar("chat_jsonl"), root->origin);
      assign("dataset.data_path", scalar(folder + "/training.jsonl"), root->origin);
      // Bridge's SFT builder reads <root>/validation.jsonl when do_validation is on.
      if (text("dataset.do_validation") != "false") {
        assign("dataset.validation_data_path", scalar(folder + "/validation.jsonl"), root->origin);
      }
    }
    const auto* preprocessing = special("dataset.preprocessing");
    const std::string kind = preprocessing == nullptr ? "null" : canonical(preprocessing->value);
    if (kind != "ChatSFTPreprocessingConfig") {
      refuse("dataset.preprocessing", preprocessing == nullptr ? source_ : preprocessing->origin,
             kind,
             "samples other than chat messages (prompt/completion columns) are not built; "
             "supported: ChatSFTPreprocessingConfig (JSONL of {\"messages\": [...]})");
    } else if (preprocessing->value.IsMap()) {
      read_fields("dataset.preprocessing", preprocessing->value);
    }
  }

  void finish_precision() {
    const auto* bf16 = special("mixed_precision.bf16");
    const auto* fp32 = special("mixed_precision.fp32");
    if (bf16 != nullptr && canonical(bf16->value) == "true") {
      assign("mixed_precision", scalar("bf16_mixed"), bf16->origin);
    } else if (fp32 != nullptr || bf16 != nullptr) {
      assign("mixed_precision", scalar("fp32"), (fp32 != nullptr ? fp32 : bf16)->origin);
    }
  }

  // --- names ------------------------------------------------------------------------------------

  static std::vector<std::string> section_names() {
    std::set<std::string> names = {"env_vars", "optimizer_config_override_provider"};
    for (const auto& field : bridge_fields()) {
      const std::string section(field.section);
      names.insert(section.substr(0, section.find('.')));
    }
    return {names.begin(), names.end()};
  }
  static bool is_known_section(const std::string& name) {
    const auto names = section_names();
    return std::find(names.begin(), names.end(), name) != names.end();
  }
  static bool has_nested_fields(const std::string& path) {
    for (const auto& field : bridge_fields()) {
      if (field.section == path) return true;
    }
    return false;
  }
  static std::vector<std::string> field_paths(const std::string& section) {
    std::vector<std::string> paths;
    for (const auto& field : bridge_fields()) {
      if (field.section == section && (paths.empty() || paths.back() != field.path())) {
        paths.push_back(field.path());
      }
    }
    return paths;
  }
  static std::string release_labels() {
    std::string out;
    for (const auto& release : bridge_releases()) {
      out += (out.empty() ? "" : ", ") + std::string(release.label);
    }
    return out;
  }
  static std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
    const auto suggestion = closest_match(word, names);
    return suggestion.empty() ? std::string() : "; did you mean " + suggestion + "?";
  }

  std::string source_;
  ProblemList& problems_;
  std::vector<std::string>& inert_settings_;
  std::vector<Assignment> out_;
  std::map<std::string, Entry> special_;
  std::map<std::string, std::string> section_class_;
  DatasetKind dataset_kind_ = DatasetKind::unknown;
};

}  // namespace

bool is_bridge_dump(const YAML::Node& root) {
  if (!root.IsMap()) return false;
  if (root["_target_"]) return true;
  for (const auto& entry : root) {
    if (entry.second.IsMap() && entry.second["_target_"]) return true;
  }
  return false;
}

std::vector<Assignment> read_bridge_assignments(const YAML::Node& root, const std::string& source,
                                                ProblemList& problems,
                                                std::vector<std::string>& inert_settings) {
  return BridgeReader(source, problems, inert_settings).read(root);
}

}  // namespace dyncp::config::detail
