// Rules for the data source, tokenizer, optimizer, LR schedule, recomputation, checkpointing
// the packing cost model and the W&B logger; fills the LR-schedule defaults.

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "config/chat_role_names.hpp"
#include "config/key_table.hpp"
#include "config/length_distribution.hpp"
#include "config/recompute_modules.hpp"
#include "config/validation_rules.hpp"

namespace dyncp::config::detail {

namespace {

std::string str(std::int64_t value) {
  return std::to_string(value);
}
std::string num(double value) {
  return format_value(KeyValue{value});
}

void check_data(ConfigContainer& config, ProblemList& problems) {
  const auto& dataset = config.dataset;
  if (!dataset.shuffle && dataset.dataloader_type == DataloaderType::cyclic) {
    problems.add("dataset.shuffle", "false",
                 "dataset.dataloader_type cyclic always shuffles (Megatron's random sampler); "
                 "use dataloader_type single for file order, or shuffle true");
  }
  if (config.validation.eval_interval && dataset.type != DatasetType::mock_varlen &&
      dataset.validation_data_path.empty()) {
    problems.add("validation.eval_interval", str(*config.validation.eval_interval),
                 "evaluation needs held-out data: set dataset.validation_data_path");
  }

  const std::int64_t seq_length = dataset.seq_length.value_or(config.model.seq_length);
  if (dataset.type == DatasetType::mock_varlen) {
    try {
      const auto distribution = parse_length_distribution(dataset.mock_length_distribution,
                                                          "dataset.mock_length_distribution");
      if (distribution.max_length > seq_length) {
        problems.add("dataset.mock_length_distribution", dataset.mock_length_distribution,
                     "max " + str(distribution.max_length) + " exceeds the sequence length " +
                         str(seq_length) + "; lower max or raise model.seq_length");
      }
    } catch (const core::Error& error) {
      problems.add_line(error.what());
    }
  } else if (dataset.data_path.empty()) {
    problems.add("dataset.data_path", "\"\"",
                 "dataset.type=" + to_string(dataset.type) +
                     " reads a data file; set dataset.data_path (or use dataset.type=mock_varlen)");
  }
  if (!dataset.chat_template_kwargs.empty()) {
    const auto kwargs = nlohmann::json::parse(dataset.chat_template_kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) {
      problems.add(
          "dataset.chat_template_kwargs", dataset.chat_template_kwargs,
          "must be a JSON object of template variables, e.g. {\"enable_thinking\": false}");
    }
  }
  if (const auto roles = parse_chat_role_names(dataset.chat_role_names); roles.bad_entry) {
    problems.add("dataset.chat_role_names", dataset.chat_role_names,
                 "'" + *roles.bad_entry +
                     "' is not name=role with role one of system, user, assistant, tool");
  }
  if (dataset.type == DatasetType::chat_jsonl) {
    if (config.tokenizer.tokenizer_type != TokenizerType::HuggingFaceTokenizer) {
      problems.add("tokenizer.tokenizer_type", to_string(config.tokenizer.tokenizer_type),
                   "chat_jsonl data must be tokenized; use HuggingFaceTokenizer");
    } else if (config.tokenizer.tokenizer_model.empty() && config.model.hf_model_path.empty()) {
      problems.add("tokenizer.tokenizer_model", "\"\"",
                   "chat_jsonl data needs a tokenizer.json; set tokenizer.tokenizer_model or "
                   "model.hf_model_path");
    }
  }
}

void check_optimizer(ConfigContainer& config, ProblemList& problems) {
  const auto& optimizer = config.optimizer;
  if (!(optimizer.lr > 0)) problems.add("optimizer.lr", num(optimizer.lr), "must be > 0");
  if (!(optimizer.min_lr >= 0 && optimizer.min_lr <= optimizer.lr)) {
    problems.add("optimizer.min_lr", num(optimizer.min_lr),
                 "must be in [0, optimizer.lr = " + num(optimizer.lr) + "]");
  }
  if (!(optimizer.weight_decay >= 0)) {
    problems.add("optimizer.weight_decay", num(optimizer.weight_decay), "must be >= 0");
  }
  if (!(optimizer.adam_beta1 >= 0 && optimizer.adam_beta1 < 1)) {
    problems.add("optimizer.adam_beta1", num(optimizer.adam_beta1), "must be in [0, 1)");
  }
  if (!(optimizer.adam_beta2 >= 0 && optimizer.adam_beta2 < 1)) {
    problems.add("optimizer.adam_beta2", num(optimizer.adam_beta2), "must be in [0, 1)");
  }
  if (!(optimizer.adam_eps > 0)) {
    problems.add("optimizer.adam_eps", num(optimizer.adam_eps), "must be > 0");
  }
  if (!(optimizer.clip_grad >= 0)) {
    problems.add("optimizer.clip_grad", num(optimizer.clip_grad), "must be >= 0 (0 turns it off)");
  }
  if (!optimizer.use_precision_aware_optimizer) {
    if (optimizer.exp_avg_dtype != StateDType::float32) {
      problems.add("optimizer.exp_avg_dtype", to_string(optimizer.exp_avg_dtype),
                   "bf16 optimizer state needs optimizer.use_precision_aware_optimizer=true "
                   "(set it, or use float32)");
    }
    if (optimizer.exp_avg_sq_dtype != StateDType::float32) {
      problems.add("optimizer.exp_avg_sq_dtype", to_string(optimizer.exp_avg_sq_dtype),
                   "bf16 optimizer state needs optimizer.use_precision_aware_optimizer=true "
                   "(set it, or use float32)");
    }
  }
}

void resolve_lr_schedule(ConfigContainer& config, ProblemList& problems) {
  auto& schedule = config.scheduler;
  if (!schedule.lr_decay_iters) schedule.lr_decay_iters = config.train.train_iters;
  if (!schedule.start_weight_decay) schedule.start_weight_decay = config.optimizer.weight_decay;
  if (!schedule.end_weight_decay) schedule.end_weight_decay = config.optimizer.weight_decay;
  if (schedule.lr_warmup_iters > *schedule.lr_decay_iters) {
    problems.add("scheduler.lr_warmup_iters", str(schedule.lr_warmup_iters),
                 "must be <= scheduler.lr_decay_iters " + str(*schedule.lr_decay_iters) +
                     " (unset, that is train.train_iters)");
  }
  if (!(schedule.lr_warmup_init >= 0)) {
    problems.add("scheduler.lr_warmup_init", num(schedule.lr_warmup_init), "must be >= 0");
  }
  if (!(*schedule.start_weight_decay >= 0)) {
    problems.add("scheduler.start_weight_decay", num(*schedule.start_weight_decay), "must be >= 0");
  }
  if (!(*schedule.end_weight_decay >= 0)) {
    problems.add("scheduler.end_weight_decay", num(*schedule.end_weight_decay), "must be >= 0");
  }
}

void check_recompute(ModelConfig& model, ProblemList& problems) {
  const bool full = model.recompute_granularity == RecomputeGranularity::full;
  const bool selective = model.recompute_granularity == RecomputeGranularity::selective;
  if (model.recompute_method && !full) {
    problems.add("model.recompute_method", to_string(*model.recompute_method),
                 "only applies with model.recompute_granularity=full");
  }
  if (model.recompute_num_layers && !model.recompute_method && !full) {
    problems.add("model.recompute_num_layers", str(*model.recompute_num_layers),
                 "only applies with model.recompute_granularity=full");
  }
  if (!model.recompute_modules.empty() && !selective) {
    problems.add("model.recompute_modules", "[...]",
                 "only applies with model.recompute_granularity=selective");
  }
  if (selective) {
    // Megatron's default list; core_attn drops nothing here (docs/model.md).
    if (model.recompute_modules.empty()) model.recompute_modules = {"core_attn"};
    for (const auto& module : model.recompute_modules)
      if (!is_recompute_module(module))
        problems.add("model.recompute_modules", module,
                     "not a module Megatron recomputes (" +
                         recompute_module_names(/*built_only=*/false) + ")");
  }
  if (full && model.recompute_method == RecomputeMethod::block && model.recompute_num_layers &&
      *model.recompute_num_layers > model.architecture.num_hidden_layers) {
    problems.add("model.recompute_num_layers", str(*model.recompute_num_layers),
                 "block recomputes the first n layers; the model has " +
                     str(model.architecture.num_hidden_layers) +
                     " (use at most that, or recompute_method=uniform)");
  }
  if (full) {
    if (!model.recompute_method) model.recompute_method = RecomputeMethod::uniform;
    if (!model.recompute_num_layers) model.recompute_num_layers = 1;
  }
}

void check_runtime(ConfigContainer& config, ProblemList& problems) {
  if (config.checkpoint.ckpt_step && config.checkpoint.load.empty() &&
      config.checkpoint.save.empty()) {
    problems.add("checkpoint.ckpt_step", str(*config.checkpoint.ckpt_step),
                 "picks a checkpoint to resume from: set checkpoint.load (or checkpoint.save)");
  }
  if (config.checkpoint.ckpt_step && config.checkpoint.overwrite &&
      config.checkpoint.load.empty()) {
    problems.add("checkpoint.ckpt_step", str(*config.checkpoint.ckpt_step),
                 "with checkpoint.overwrite=true and no checkpoint.load nothing is resumed; "
                 "set checkpoint.load");
  }
  // A folder that is there but holds no HF weights (a Megatron torch_dist checkpoint, an empty
  // download) would otherwise surface only when training starts.
  const auto& pretrained = config.checkpoint.pretrained_checkpoint;
  std::error_code error;
  if (!pretrained.empty() && std::filesystem::exists(pretrained, error) &&
      !has_hf_weights(pretrained)) {
    problems.add("checkpoint.pretrained_checkpoint", pretrained,
                 "not an HF checkpoint with weights (config.json and model.safetensors or "
                 "model.safetensors.index.json); export a Megatron checkpoint to HF first "
                 "(Bridge's AutoBridge export)");
  }
  if (config.checkpoint.async_save && !config.checkpoint.sharded) {
    problems.add("checkpoint.async_save", "true",
                 "asynchronous saves are sharded (every rank writes its own shard in the "
                 "background), but checkpoint.sharded is false (rank 0 writes everything); drop "
                 "checkpoint.sharded=false or set checkpoint.async_save=false");
  }
  if (config.checkpoint.most_recent_k == 0) {
    problems.add("checkpoint.most_recent_k", "0",
                 "keeping no checkpoint is not allowed; use -1 (all) or a count >= 1");
  }
  const auto& packing = config.packing;
  if (!(packing.device_flops_per_second > 0)) {
    problems.add("packing.device_flops_per_second", num(packing.device_flops_per_second),
                 "must be > 0");
  }
  if (!(packing.link_bytes_per_second > 0)) {
    problems.add("packing.link_bytes_per_second", num(packing.link_bytes_per_second),
                 "must be > 0");
  }
  if (!(packing.collective_latency_seconds >= 0)) {
    problems.add("packing.collective_latency_seconds", num(packing.collective_latency_seconds),
                 "must be >= 0");
  }
  if (!(packing.microbatch_overhead_seconds >= 0)) {
    problems.add("packing.microbatch_overhead_seconds", num(packing.microbatch_overhead_seconds),
                 "must be >= 0");
  }
  for (const auto& [key, value] : {std::pair{"packing.step_model_bf16_flops_per_second",
                                             packing.step_model_bf16_flops_per_second},
                                   std::pair{"packing.step_model_fp32_flops_per_second",
                                             packing.step_model_fp32_flops_per_second},
                                   std::pair{"packing.step_model_memory_bytes_per_second",
                                             packing.step_model_memory_bytes_per_second},
                                   std::pair{"packing.step_model_deltanet_token_step_seconds",
                                             packing.step_model_deltanet_token_step_seconds},
                                   std::pair{"packing.step_model_deltanet_chunk_step_seconds",
                                             packing.step_model_deltanet_chunk_step_seconds}}) {
    if (!(value > 0)) problems.add(key, num(value), "must be > 0");
  }
  if (!(packing.step_model_launch_latency_seconds >= 0)) {
    problems.add("packing.step_model_launch_latency_seconds",
                 num(packing.step_model_launch_latency_seconds), "must be >= 0");
  }
  // An efficiency is a fraction of a peak: above 1 would model a device faster than its peak.
  for (const auto& [key, value] :
       {std::pair{"packing.step_model_dense_gemm_efficiency",
                  packing.step_model_dense_gemm_efficiency},
        std::pair{"packing.step_model_expert_gemm_efficiency",
                  packing.step_model_expert_gemm_efficiency},
        std::pair{"packing.step_model_attention_efficiency",
                  packing.step_model_attention_efficiency},
        std::pair{"packing.step_model_deltanet_efficiency", packing.step_model_deltanet_efficiency},
        std::pair{"packing.step_model_cross_entropy_efficiency",
                  packing.step_model_cross_entropy_efficiency},
        std::pair{"packing.step_model_memory_efficiency", packing.step_model_memory_efficiency}}) {
    if (!(value > 0 && value <= 1)) {
      problems.add(key, num(value), "must be > 0 and <= 1 (a fraction of the device's peak)");
    }
  }
}

// W&B runs through the sidecar, which reads the metrics JSONL; Megatron-Bridge skips W&B when
// the run has no name, which here would be a project silently ignored.
void check_logger(const LoggerConfig& logger, ProblemList& problems) {
  if (logger.wandb_project.empty()) {
    for (const auto& [key, value] : {std::pair{"logger.wandb_entity", &logger.wandb_entity},
                                     std::pair{"logger.wandb_exp_name", &logger.wandb_exp_name},
                                     std::pair{"logger.wandb_save_dir", &logger.wandb_save_dir}}) {
      if (!value->empty()) {
        problems.add(key, *value,
                     "has no effect without logger.wandb_project (W&B is off); set the project "
                     "or remove this key");
      }
    }
    return;
  }
  if (logger.metrics_path.empty()) {
    problems.add("logger.wandb_project", logger.wandb_project,
                 "W&B logging reads the metrics JSONL: set logger.metrics_path=FILE");
  }
  if (logger.wandb_exp_name.empty()) {
    problems.add("logger.wandb_project", logger.wandb_project,
                 "a W&B run needs a name: set logger.wandb_exp_name=NAME");
  }
}

}  // namespace

void check_training(ConfigContainer& config, ProblemList& problems) {
  check_data(config, problems);
  check_optimizer(config, problems);
  resolve_lr_schedule(config, problems);
  check_recompute(config.model, problems);
  check_runtime(config, problems);
  check_logger(config.logger, problems);
}

}  // namespace dyncp::config::detail
