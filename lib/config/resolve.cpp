#include "config/resolve.hpp"

#include <algorithm>
#include <sstream>

#include "config/key_table.hpp"
#include "config/pipeline_split.hpp"
#include "config/problem_list.hpp"
#include "config/recompute_modules.hpp"
#include "config/validation_rules.hpp"

namespace dyncp::config {

void resolve_config(ConfigContainer& config, std::int64_t world_size) {
  ProblemList problems;
  if (world_size < 1) {
    problems.add("world size", std::to_string(world_size),
                 "must be at least 1 (check --world-size or the launcher's environment)");
    problems.throw_if_any();
  }
  detail::check_model_architecture(config, problems);
  detail::check_parallel_and_packing(config, world_size, problems);
  detail::check_training(config, problems);
  problems.throw_if_any();
}

std::vector<std::string> unbuilt_features(const ConfigContainer& config) {
  const ConfigContainer defaults;
  // Grouped by feature, in key-table order: "feature (key=value, key=value)".
  std::vector<std::pair<std::string, std::string>> features;
  for (const auto& spec : key_table()) {
    if (spec.unbuilt_feature.empty()) continue;
    const auto value = format_value(spec.get(config));
    if (value == format_value(spec.get(defaults))) continue;
    const std::string setting = spec.path + "=" + value;
    auto it = std::find_if(features.begin(), features.end(),
                           [&](const auto& entry) { return entry.first == spec.unbuilt_feature; });
    if (it == features.end()) {
      features.emplace_back(spec.unbuilt_feature, setting);
    } else {
      it->second += ", " + setting;
    }
  }
  std::vector<std::string> out;
  for (const auto& [feature, settings] : features) out.push_back(feature + " (" + settings + ")");
  // Tensor parallelism: the layout, its rules and the dry run's estimates are built, the TP
  // model is not, so a training run refuses it while --dry-run shows what it would be.
  if (config.model.tensor_model_parallel_size > 1) {
    std::string settings = "model.tensor_model_parallel_size=" +
                           std::to_string(config.model.tensor_model_parallel_size);
    if (config.model.sequence_parallel) settings += ", model.sequence_parallel=true";
    if (config.model.expert_tensor_parallel_size) {
      settings += ", model.expert_tensor_parallel_size=" +
                  std::to_string(*config.model.expert_tensor_parallel_size);
    }
    out.push_back("tensor parallelism in training (" + settings +
                  "; built: the tp x cp x dp layout, its groups and rules, the alignment and the "
                  "memory estimate shown by --dry-run; supported in training: "
                  "model.tensor_model_parallel_size=1)");
  }
  // Selective recomputation is built for some of Megatron's modules only.
  std::string unbuilt_modules;
  for (const auto& module : config.model.recompute_modules)
    if (is_recompute_module(module) && !is_built_recompute_module(module))
      unbuilt_modules += (unbuilt_modules.empty() ? "" : ", ") + module;
  if (!unbuilt_modules.empty() &&
      config.model.recompute_granularity == RecomputeGranularity::selective)
    out.push_back("selective recomputation of " + unbuilt_modules + " (model.recompute_modules=" +
                  format_value(KeyValue{config.model.recompute_modules}) +
                  "; built: " + recompute_module_names(/*built_only=*/true) + ")");
  return out;
}

std::vector<std::string> config_warnings(const ConfigContainer& config) {
  std::vector<std::string> out;
  if (!config.bridge_inert_settings.empty()) {
    std::string settings;
    for (const auto& setting : config.bridge_inert_settings) {
      settings += (settings.empty() ? "" : ", ") + setting;
    }
    out.push_back(std::to_string(config.bridge_inert_settings.size()) +
                  " Megatron-Bridge performance/infrastructure settings differ from Bridge's "
                  "defaults and have no effect here (docs/config.md, \"Coming from "
                  "Megatron-Bridge\"): " +
                  settings);
  }
  const auto& arch = config.model.architecture;
  if (config.model.seq_length > arch.max_position_embeddings) {
    out.push_back("model.seq_length " + std::to_string(config.model.seq_length) +
                  " exceeds model.max_position_embeddings " +
                  std::to_string(arch.max_position_embeddings) +
                  ": positions beyond the checkpoint's trained context");
  }
  if (config.validation.eval_interval && config.validation.eval_iters == 0) {
    out.push_back(
        "validation.eval_interval is set but validation.eval_iters is 0: no evaluation "
        "will run");
  }
  if (config.model.dynamic_context_parallel && config.layout.pool_size > 0 &&
      config.model.min_dynamic_context_parallel_size == config.layout.pool_size) {
    out.push_back(
        "model.min_dynamic_context_parallel_size equals the pool: every microbatch runs "
        "on the whole pool, so dynamic CP cannot pick smaller groups");
  }
  return out;
}

std::string describe_run(const ConfigContainer& config) {
  const auto& arch = config.model.architecture;
  std::ostringstream out;
  out << "resolved configuration:\n";
  out << "  model:                   " << arch.model_type << ", " << arch.num_hidden_layers
      << " layers, hidden " << arch.hidden_size << ", heads " << arch.num_attention_heads << "/"
      << arch.num_key_value_heads << " x " << arch.head_dim << ", experts " << arch.num_experts
      << " top-" << arch.num_experts_per_tok << ", vocab " << arch.vocab_size << "\n";
  out << "  seq_length:              " << config.model.seq_length << "\n";
  out << "  dynamic CP:              " << (config.model.dynamic_context_parallel ? "on" : "off")
      << (config.model.dynamic_context_parallel
              ? " (min group " + std::to_string(config.model.min_dynamic_context_parallel_size) +
                    ")"
              : std::string())
      << "\n";
  out << "  global batch:            " << config.train.global_batch_size << " samples x "
      << config.train.train_iters << " steps, lr " << format_value(KeyValue{config.optimizer.lr})
      << " (" << to_string(config.scheduler.lr_decay_style) << ")\n";
  out << "  data:                    " << to_string(config.dataset.type) << " "
      << (config.dataset.type == DatasetType::mock_varlen ? config.dataset.mock_length_distribution
                                                          : config.dataset.data_path)
      << "\n";
  return out.str();
}

std::string describe_layout(const ConfigContainer& config) {
  const auto& layout = config.layout;
  const bool dynamic = config.model.dynamic_context_parallel;
  std::ostringstream out;
  out << "parallel layout:\n";
  const bool pipelined = layout.pipeline_model_parallel_size > 1;
  const bool tensor = layout.tensor_model_parallel_size > 1;
  out << "  world size:              " << layout.world_size
      << (pipelined && tensor ? " (pp x dp x cp x tp: TP fastest, stage slowest)"
          : tensor            ? " (tp x cp x dp, TP fastest)"
                              : "")
      << "\n";
  if (pipelined) {
    out << "  pipeline parallel (pp):  " << layout.pipeline_model_parallel_size
        << " stages (each with its own dp x cp pool" << (tensor ? " per TP rank" : "") << "), "
        << layout.virtual_pipeline_model_parallel_size << " virtual chunk(s) per stage\n";
    out << "  layer split:\n" << split_layers(pipeline_split_input(config.model)).describe();
  }
  if (tensor) {
    out << "  tensor parallel (tp):    " << layout.tensor_model_parallel_size
        << (config.model.sequence_parallel ? " with sequence parallelism" : " (no SP)") << "\n";
    out << "  expert tensor parallel:  " << layout.expert_tensor_parallel_size
        << (layout.expert_tensor_parallel_size == 1 ? " (whole experts per EP rank)"
                                                    : " (each expert split over its TP group)")
        << "\n";
  }
  out << "  data parallel (dp):      " << layout.data_parallel_size << "\n";
  out << "  context parallel (cp):   " << layout.context_parallel_size
      << (dynamic ? " (static size; dynamic CP draws groups from the pool)" : " (static)") << "\n";
  out << "  dp x cp pool:            " << layout.pool_size
      << (layout.tensor_model_parallel_size > 1
              ? " (one per TP rank: " + std::to_string(layout.tensor_model_parallel_size) +
                    " pools)"
              : std::string())
      << "\n";
  out << "  expert parallel (ep):    " << layout.expert_model_parallel_size << "\n";
  out << "  expert data parallel:    " << layout.expert_data_parallel_size << "\n";
  out << "  alignment multiple:      " << layout.alignment_multiple << "\n";
  out << "  packing scheduler:       "
      << (config.model.sequence_packing_scheduler
              ? to_string(*config.model.sequence_packing_scheduler)
              : "none")
      << "\n";
  out << "  capacity per pool rank:  " << config.model.max_seqlen_per_dp_cp_rank.value_or(0)
      << " tokens\n";
  out << "  CP group sizes:          ";
  for (std::size_t i = 0; i < layout.dynamic_group_sizes.size(); ++i) {
    out << (i == 0 ? "" : ", ") << layout.dynamic_group_sizes[i];
  }
  out << (dynamic ? " (dynamic: every power of two from the minimum to the pool)" : " (static)")
      << "\n";
  return out.str();
}

}  // namespace dyncp::config
