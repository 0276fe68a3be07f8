// The full list of configuration keys is frozen here: adding, renaming or removing a key (or
// an alias, or an accepted Bridge key) fails this test until the list is updated on purpose.

#include "config/key_table.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "config/value_parse.hpp"

using namespace dyncp::config;

namespace {

const std::vector<std::string> frozen_keys = {
    "model.hf_model_path",
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size",
    "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage",
    "model.account_for_embedding_in_pipeline_split",
    "model.account_for_loss_in_pipeline_split",
    "model.context_parallel_size",
    "model.expert_model_parallel_size",
    "model.sequence_parallel",
    "model.expert_tensor_parallel_size",
    "model.seq_length",
    "model.dynamic_context_parallel",
    "model.min_dynamic_context_parallel_size",
    "model.max_seqlen_per_dp_cp_rank",
    "model.sequence_packing_scheduler",
    "model.cp_comm_type",
    "model.attention_backend",
    "model.hierarchical_context_parallel_sizes",
    "model.calculate_per_token_loss",
    "model.moe_router_load_balancing_type",
    "model.moe_router_force_load_balancing",
    "model.moe_grouped_gemm",
    "model.moe_permute_fusion",
    "model.moe_shared_expert_overlap",
    "model.recompute_granularity",
    "model.recompute_method",
    "model.recompute_num_layers",
    "model.recompute_modules",
    "model.model_type",
    "model.vocab_size",
    "model.hidden_size",
    "model.intermediate_size",
    "model.num_hidden_layers",
    "model.num_attention_heads",
    "model.num_key_value_heads",
    "model.head_dim",
    "model.max_position_embeddings",
    "model.rms_norm_eps",
    "model.rope_theta",
    "model.partial_rotary_factor",
    "model.attention_bias",
    "model.tie_word_embeddings",
    "model.hidden_act",
    "model.num_experts",
    "model.num_experts_per_tok",
    "model.moe_intermediate_size",
    "model.decoder_sparse_step",
    "model.mlp_only_layers",
    "model.norm_topk_prob",
    "model.router_aux_loss_coef",
    "model.shared_expert_intermediate_size",
    "model.layer_types",
    "model.full_attention_interval",
    "model.linear_num_key_heads",
    "model.linear_num_value_heads",
    "model.linear_key_head_dim",
    "model.linear_value_head_dim",
    "model.linear_conv_kernel_dim",
    "model.bos_token_id",
    "model.eos_token_id",
    "dataset.type",
    "dataset.data_path",
    "dataset.validation_data_path",
    "dataset.seq_length",
    "dataset.enable_global_batch_packing",
    "dataset.dataloader_type",
    "dataset.fold_alignment_padding",
    "dataset.global_batch_packing_pad_to_multiple_of",
    "dataset.cache_dir",
    "dataset.chat_content_key",
    "dataset.chat_messages_key",
    "dataset.chat_role_key",
    "dataset.chat_role_names",
    "dataset.chat_template_kwargs",
    "dataset.truncation",
    "dataset.on_bad_sample",
    "dataset.shuffle",
    "dataset.num_workers",
    "dataset.mock_length_distribution",
    "dataset.mock_num_samples",
    "tokenizer.tokenizer_type",
    "tokenizer.tokenizer_model",
    "tokenizer.chat_template",
    "train.micro_batch_size",
    "train.global_batch_size",
    "train.train_iters",
    "train.stop_on_nan",
    "validation.eval_interval",
    "validation.eval_iters",
    "optimizer.optimizer",
    "optimizer.lr",
    "optimizer.min_lr",
    "optimizer.weight_decay",
    "optimizer.adam_beta1",
    "optimizer.adam_beta2",
    "optimizer.adam_eps",
    "optimizer.clip_grad",
    "optimizer.use_precision_aware_optimizer",
    "optimizer.exp_avg_dtype",
    "optimizer.exp_avg_sq_dtype",
    "scheduler.lr_decay_style",
    "scheduler.lr_warmup_iters",
    "scheduler.lr_warmup_init",
    "scheduler.lr_decay_iters",
    "scheduler.start_weight_decay",
    "scheduler.end_weight_decay",
    "scheduler.weight_decay_incr_style",
    "scheduler.override_opt_param_scheduler",
    "ddp.average_in_collective",
    "ddp.use_distributed_optimizer",
    "ddp.overlap_grad_reduce",
    "ddp.overlap_param_gather",
    "ddp.bucket_size",
    "dist.use_decentralized_pg",
    "dist.device",
    "dist.eager_dynamic_cp_groups",
    "dist.distributed_timeout_minutes",
    "checkpoint.pretrained_checkpoint",
    "checkpoint.save",
    "checkpoint.load",
    "checkpoint.ckpt_step",
    "checkpoint.overwrite",
    "checkpoint.save_interval",
    "checkpoint.most_recent_k",
    "checkpoint.export_hf",
    "checkpoint.sharded",
    "checkpoint.async_save",
    "logger.log_interval",
    "logger.metrics_path",
    "logger.tensorboard_dir",
    "logger.wandb_project",
    "logger.wandb_entity",
    "logger.wandb_exp_name",
    "logger.wandb_save_dir",
    "rng.seed",
    "packing.alignment",
    "packing.device_flops_per_second",
    "packing.link_bytes_per_second",
    "packing.collective_latency_seconds",
    "packing.microbatch_overhead_seconds",
    "packing.step_model_deltanet_kernel",
    "packing.step_model_bf16_flops_per_second",
    "packing.step_model_fp32_flops_per_second",
    "packing.step_model_memory_bytes_per_second",
    "packing.step_model_launch_latency_seconds",
    "packing.step_model_dense_gemm_efficiency",
    "packing.step_model_expert_gemm_efficiency",
    "packing.step_model_attention_efficiency",
    "packing.step_model_deltanet_efficiency",
    "packing.step_model_cross_entropy_efficiency",
    "packing.step_model_memory_efficiency",
    "packing.step_model_deltanet_token_step_seconds",
    "packing.step_model_deltanet_chunk_step_seconds",
    "mixed_precision",
};
const std::vector<std::string> frozen_aliases = {
    "model.padded_vocab_size",  "model.ffn_hidden_size",
    "model.num_layers",         "model.num_query_groups",
    "model.kv_channels",        "model.layernorm_epsilon",
    "model.rotary_base",        "model.rotary_percent",
    "model.add_qkv_bias",       "model.share_embeddings_and_output_weights",
    "model.num_moe_experts",    "model.num_local_experts",
    "model.moe_router_topk",    "model.moe_ffn_hidden_size",
    "model.moe_aux_loss_coeff", "model.moe_shared_expert_intermediate_size",
    "checkpoint.keep",
};
const std::vector<std::string> frozen_inert_keys = {
    "model.cuda_graph_impl",           "model.transformer_impl",
    "model.moe_token_dispatcher_type", "model.cross_entropy_loss_fusion",
    "model.cross_entropy_fusion_impl", "model.hybrid_context_parallel",
    "ddp.grad_reduce_in_fp32",         "ddp.check_for_nan_in_grad",
    "ddp.use_megatron_fsdp",           "dataset.packed_sequence_specs",
};

std::vector<std::string> sorted(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  return items;
}

}  // namespace

TEST_CASE("the key list is frozen", "[config]") {
  std::vector<std::string> keys, aliases, inert;
  for (const auto& spec : key_table()) {
    keys.push_back(spec.path);
    aliases.insert(aliases.end(), spec.aliases.begin(), spec.aliases.end());
  }
  for (const auto& key : inert_keys()) inert.push_back(key.path);
  CHECK(sorted(keys) == sorted(frozen_keys));
  CHECK(sorted(aliases) == sorted(frozen_aliases));
  CHECK(sorted(inert) == sorted(frozen_inert_keys));
}

TEST_CASE("the keys the issue names verbatim exist", "[config]") {
  for (const char* path :
       {"model.seq_length", "model.context_parallel_size", "model.dynamic_context_parallel",
        "model.min_dynamic_context_parallel_size", "model.max_seqlen_per_dp_cp_rank",
        "model.sequence_packing_scheduler", "model.calculate_per_token_loss",
        "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
        "model.expert_model_parallel_size", "model.sequence_parallel",
        "dataset.enable_global_batch_packing", "dataset.dataloader_type",
        "dataset.fold_alignment_padding", "train.micro_batch_size", "train.global_batch_size",
        "train.train_iters", "ddp.average_in_collective", "dist.use_decentralized_pg"}) {
    INFO(path);
    const auto* spec = find_key(path);
    REQUIRE(spec != nullptr);
    CHECK(spec->path == path);
  }
}

TEST_CASE("Megatron spellings are aliases of the HF model fields", "[config]") {
  const std::vector<std::pair<std::string, std::string>> aliases = {
      {"model.num_moe_experts", "model.num_experts"},
      {"model.moe_router_topk", "model.num_experts_per_tok"},
      {"model.moe_ffn_hidden_size", "model.moe_intermediate_size"},
      {"model.num_query_groups", "model.num_key_value_heads"},
      {"model.kv_channels", "model.head_dim"},
      {"model.num_layers", "model.num_hidden_layers"},
      {"model.ffn_hidden_size", "model.intermediate_size"}};
  for (const auto& [alias, canonical] : aliases) {
    INFO(alias);
    const auto* spec = find_key(alias);
    REQUIRE(spec != nullptr);
    CHECK(spec->path == canonical);
  }
}

TEST_CASE("every key is declared once, documented, and its default reads back", "[config]") {
  std::set<std::string> names;
  const ConfigContainer defaults;
  for (const auto& spec : key_table()) {
    INFO(spec.path);
    CHECK(names.insert(spec.path).second);
    for (const auto& alias : spec.aliases) CHECK(names.insert(alias).second);
    CHECK_FALSE(spec.doc.empty());
    // The default, written as text and parsed as a user value, gives the same value.
    const auto value = spec.get(defaults);
    RawValue raw;
    if (const auto* list = std::get_if<std::vector<std::int64_t>>(&value)) {
      raw.kind = RawValue::Kind::list;
      for (const auto item : *list)
        raw.items.push_back({RawValue::Kind::scalar, std::to_string(item), false, {}});
    } else if (const auto* names_list = std::get_if<std::vector<std::string>>(&value)) {
      raw.kind = RawValue::Kind::list;
      for (const auto& item : *names_list)
        raw.items.push_back({RawValue::Kind::scalar, item, true, {}});
    } else if (std::holds_alternative<std::monostate>(value)) {
      raw.kind = RawValue::Kind::null;
    } else {
      const auto text = format_value(value);
      raw = {RawValue::Kind::scalar,
             text == "\"\"" ? "" : text,
             std::holds_alternative<std::string>(value),
             {}};
    }
    std::string error;
    const auto parsed = parse_value(spec, raw, error);
    INFO(error);
    REQUIRE(parsed.has_value());
    ConfigContainer copy;
    spec.set(copy, *parsed);
    CHECK(format_value(spec.get(copy)) == format_value(value));
  }
  for (const auto& inert : inert_keys()) {
    CHECK(names.insert(inert.path).second);
    CHECK_FALSE(inert.accepted.empty());
  }
}

TEST_CASE("closed choices list their spellings in the type", "[config]") {
  const auto* scheduler = find_key("model.sequence_packing_scheduler");
  REQUIRE(scheduler != nullptr);
  CHECK(type_name(*scheduler) == "one of [dp_balanced, default_dynamic_cp, cost_aware] or null");
  const auto* dataset_type = find_key("dataset.type");
  REQUIRE(dataset_type != nullptr);
  CHECK(type_name(*dataset_type) ==
        "one of [chat_jsonl, token_jsonl, megatron_indexed, mock_varlen]");
  CHECK(type_name(*find_key("model.cp_comm_type")) == "one of [all_gather, p2p, a2a, a2a+p2p]");
  CHECK(type_name(*find_key("dist.device")) == "one of [auto, cpu, cuda]");
}
