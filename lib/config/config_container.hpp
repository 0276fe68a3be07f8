#pragma once
// The whole run configuration: one typed struct per section, with defaults. Key names follow
// Megatron-Bridge's ConfigContainer where the key exists there, and HF config.json for the model
// architecture. Every key is declared once in the key table (config/key_table.hpp), which gives
// its path, type, default (read from these structs), documentation and accessors; this header
// holds only the data. Derived values are filled by `resolve_config` (config/resolve.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/enums.hpp"
#include "config/model_architecture.hpp"

namespace dyncp::config {

struct ModelConfig {
  std::string hf_model_path;  // HF checkpoint folder or config.json: fills `architecture`
  ModelArchitecture architecture;

  // Parallelism; world = pp x dp x cp x tp (docs/dist.md), so dp = world / (pp x cp x tp).
  std::int64_t tensor_model_parallel_size = 1;
  // Pipeline parallelism (Megatron's keys; docs/dist.md "Pipeline stages"): the stages, the
  // virtual chunks per stage (interleaved 1F1B), the uneven first/last stages and whether the
  // embedding / loss count as a layer in the split.
  std::int64_t pipeline_model_parallel_size = 1;
  std::optional<std::int64_t> virtual_pipeline_model_parallel_size;  // unset: no interleaving
  std::optional<std::int64_t> num_layers_in_first_pipeline_stage;
  std::optional<std::int64_t> num_layers_in_last_pipeline_stage;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  std::int64_t context_parallel_size = 1;
  std::int64_t expert_model_parallel_size = 1;
  bool sequence_parallel = false;
  // Tensor parallelism of the experts: 1 or tensor_model_parallel_size; unset: as Megatron,
  // tensor_model_parallel_size (layout.expert_tensor_parallel_size holds the value used).
  std::optional<std::int64_t> expert_tensor_parallel_size;

  // Sequence length and dynamic context parallelism.
  std::int64_t seq_length = 4096;
  bool dynamic_context_parallel = false;
  std::int64_t min_dynamic_context_parallel_size = 1;
  std::optional<std::int64_t> max_seqlen_per_dp_cp_rank;       // must be set explicitly
  std::optional<PackingScheduler> sequence_packing_scheduler;  // derived when unset
  CpCommType cp_comm_type = CpCommType::all_gather;
  // a2a+p2p only: [inner, outer], inner x outer = context_parallel_size (empty: unset).
  std::vector<std::int64_t> hierarchical_context_parallel_sizes;
  AttentionBackend attention_backend = AttentionBackend::auto_select;

  // Loss.
  bool calculate_per_token_loss = true;
  LoadBalancingType moe_router_load_balancing_type = LoadBalancingType::aux_loss;
  // Uniform routing (Bridge's performance recipes): every token's experts come from its position,
  // not its router logits, so every expert gets the same load (ops/router.hpp).
  bool moe_router_force_load_balancing = false;

  // The MoE layer's GPU kernels (docs/model.md "MoE dispatch"): one grouped launch per expert
  // projection with the expert offsets left in device memory, and routing, plan and permuted
  // rows in one fused op. Neither changes a number; the CPU path runs the same ops either way.
  bool moe_grouped_gemm = true;
  bool moe_permute_fusion = true;
  // The hybrid's shared expert computed while the EP all-to-all of the routed rows is in
  // flight (docs/dist.md); the same numbers either way.
  bool moe_shared_expert_overlap = false;

  // Activation recomputation.
  std::optional<RecomputeGranularity> recompute_granularity;
  std::optional<RecomputeMethod> recompute_method;
  std::optional<std::int64_t> recompute_num_layers;
  std::vector<std::string> recompute_modules;
};

struct DatasetConfig {
  DatasetType type = DatasetType::chat_jsonl;
  std::string data_path;                   // JSONL file or Megatron .bin/.idx prefix
  std::string validation_data_path;        // optional held-out file for evaluation
  std::optional<std::int64_t> seq_length;  // unset: model.seq_length
  bool enable_global_batch_packing = true;
  DataloaderType dataloader_type = DataloaderType::single;
  bool fold_alignment_padding = false;
  std::optional<std::int64_t> global_batch_packing_pad_to_multiple_of;  // derived when unset
  std::string cache_dir = ".dyncp-cache";
  TruncationPolicy truncation = TruncationPolicy::drop;
  BadSamplePolicy on_bad_sample = BadSamplePolicy::error;
  bool shuffle = true;
  std::int64_t num_workers = 2;
  std::string mock_length_distribution = "lognormal(min=64,max=4096,mean=1024,sigma=1.0)";
  std::int64_t mock_num_samples = 4096;
  // chat_jsonl: extra chat-template variables (a JSON object) and the sample layout.
  std::string chat_template_kwargs;  // e.g. {"enable_thinking": false}; empty: none
  std::string chat_messages_key;     // empty: "messages", else ShareGPT "conversations"
  std::string chat_role_key;         // empty: "role" ("from" for conversations)
  std::string chat_content_key;      // empty: "content" ("value" for conversations)
  std::string chat_role_names;       // "name=role,..." e.g. "customer=user,agent=assistant"
};

struct TokenizerConfig {
  TokenizerType tokenizer_type = TokenizerType::HuggingFaceTokenizer;
  std::string tokenizer_model;  // tokenizer.json or a folder holding it; empty: hf_model_path
  ChatTemplate chat_template = ChatTemplate::qwen_chatml;
};

struct TrainConfig {
  std::int64_t micro_batch_size = 1;
  std::int64_t global_batch_size = 32;
  std::int64_t train_iters = 100;
  bool stop_on_nan = true;
};

struct ValidationConfig {
  std::optional<std::int64_t> eval_interval;  // unset: never evaluate during training
  std::int64_t eval_iters = 0;
};

struct OptimizerConfig {
  OptimizerType optimizer = OptimizerType::adam;
  double lr = 1e-4;
  double min_lr = 0.0;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;  // 0: no clipping
  bool use_precision_aware_optimizer = false;
  StateDType exp_avg_dtype = StateDType::float32;
  StateDType exp_avg_sq_dtype = StateDType::float32;
};

// The learning-rate schedule (Bridge calls this section `scheduler`; the packing scheduler is
// model.sequence_packing_scheduler).
struct LrSchedulerConfig {
  LrDecayStyle lr_decay_style = LrDecayStyle::cosine;
  std::int64_t lr_warmup_iters = 0;
  double lr_warmup_init = 0.0;
  std::optional<std::int64_t> lr_decay_iters;  // unset: train.train_iters
  std::optional<double> start_weight_decay;    // unset: optimizer.weight_decay
  std::optional<double> end_weight_decay;      // unset: optimizer.weight_decay
  WeightDecayIncrStyle weight_decay_incr_style = WeightDecayIncrStyle::constant;
  bool override_opt_param_scheduler = false;
};

struct DdpConfig {
  bool average_in_collective = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;  // with use_distributed_optimizer and overlap_grad_reduce
  std::optional<std::int64_t> bucket_size;  // unset: max(40,000,000, 1,000,000 x pool) elements
};

struct DistConfig {
  bool use_decentralized_pg = false;
  Device device = Device::auto_detect;
  bool eager_dynamic_cp_groups = false;
  std::int64_t distributed_timeout_minutes = 10;
};

struct CheckpointConfig {
  std::string pretrained_checkpoint;      // HF safetensors folder with the initial weights
  std::string save;                       // folder for training checkpoints; empty: no saving
  std::string load;                       // folder to resume from; empty: `save` if it holds one
  std::optional<std::int64_t> ckpt_step;  // resume from exactly this iteration
  bool overwrite = false;                 // let a run write into a `save` holding checkpoints
  std::optional<std::int64_t> save_interval;  // unset: save at the end only
  std::int64_t most_recent_k = -1;            // -1: keep every checkpoint
  std::string export_hf;                      // folder for an HF export at the end
  bool sharded = true;      // every rank writes its own shard (train/sharded_checkpoint.hpp)
  bool async_save = false;  // sharded saves written in the background (needs sharded)
};

struct LoggerConfig {
  std::int64_t log_interval = 1;
  std::string metrics_path;     // JSONL metrics file; empty: console only
  std::string tensorboard_dir;  // TensorBoard event files; empty: none
  // Weights & Biases through the sidecar (tools/wandb_sidecar.py), which logs the metrics JSONL;
  // Megatron-Bridge's names. An empty project turns it off.
  std::string wandb_project;
  std::string wandb_entity;    // team or user; empty: the W&B default
  std::string wandb_exp_name;  // the W&B run name
  std::string wandb_save_dir;  // W&B's local files; empty: <checkpoint.save>/wandb
};

struct RngConfig {
  std::int64_t seed = 1234;
};

// Parameters of the scheduler cost model (used by cost_aware and by dyncp-plan's statistics).
// Defaults describe an H200 with NVLink 4: 989 TFLOP/s dense BF16 peak at ~45% achieved,
// ~400 GB/s usable per direction, ~15 us per collective step.
struct PackingCostConfig {
  PackingAlignment alignment = PackingAlignment::per_group;  // padding per runtime group
  double device_flops_per_second = 4.5e14;
  double link_bytes_per_second = 4.0e11;
  double collective_latency_seconds = 1.5e-5;
  double microbatch_overhead_seconds = 5e-4;
  // The modelled GPU step of --dry-run (packing/step_model.hpp, docs/step-model.md): the
  // device's peaks (H200 SXM: bf16 dense matrix rate as measured on random data, the
  // datasheet's fp32 and HBM3e rates), the fraction of a peak each kernel class reaches, and
  // the latencies of its serial steps. The links and the collective latency are the keys above.
  DeltaNetKernel step_model_deltanet_kernel = DeltaNetKernel::chunked;
  double step_model_bf16_flops_per_second = 7.9e14;
  double step_model_fp32_flops_per_second = 6.7e13;
  double step_model_memory_bytes_per_second = 4.8e12;
  double step_model_launch_latency_seconds = 5e-6;
  double step_model_dense_gemm_efficiency = 0.7;
  double step_model_expert_gemm_efficiency = 0.5;
  double step_model_attention_efficiency = 0.35;
  double step_model_deltanet_efficiency = 0.3;
  double step_model_cross_entropy_efficiency = 0.6;
  double step_model_memory_efficiency = 0.8;
  double step_model_deltanet_token_step_seconds = 5e-7;
  double step_model_deltanet_chunk_step_seconds = 2e-6;
};

// Filled by resolve_config; not keys. The parallel layout for one world size.
struct ParallelLayout {
  std::int64_t world_size = 1;  // pp x dp x cp x tp
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t virtual_pipeline_model_parallel_size = 1;
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t pool_size = 1;  // dp x cp
  std::int64_t expert_model_parallel_size = 1;
  std::int64_t expert_data_parallel_size = 1;  // world / (etp x ep)
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t expert_tensor_parallel_size = 1;  // resolved: 1 or tp
  std::int64_t alignment_multiple = 1;
  std::vector<std::int64_t> dynamic_group_sizes;  // every CP group size that will exist
};

struct ConfigContainer {
  ModelConfig model;
  DatasetConfig dataset;
  TokenizerConfig tokenizer;
  TrainConfig train;
  ValidationConfig validation;
  OptimizerConfig optimizer;
  LrSchedulerConfig scheduler;
  DdpConfig ddp;
  DistConfig dist;
  CheckpointConfig checkpoint;
  LoggerConfig logger;
  RngConfig rng;
  PackingCostConfig packing;
  MixedPrecision mixed_precision = MixedPrecision::fp32;

  ParallelLayout layout;  // derived

  // Not keys: inert Megatron-Bridge settings the loaded dump sets away from Bridge's defaults
  // ("path=value"), for the one start-up warning (config_warnings).
  std::vector<std::string> bridge_inert_settings;
};

}  // namespace dyncp::config
