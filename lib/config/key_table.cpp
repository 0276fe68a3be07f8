#include "config/key_table.hpp"

#include <charconv>
#include <cmath>

#include "config/key_builder.hpp"

namespace dyncp::config {

namespace {

using detail::KeyOptions;
using detail::make_key;

void append_parallel_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key("model.hf_model_path", DYNCP_FIELD(model.hf_model_path),
                          "HF checkpoint folder (or its config.json) whose config fills the model "
                          "architecture keys; keys set in the recipe override it",
                          {.rules = "empty: the architecture comes from the model.* keys alone"}));
  keys.push_back(
      make_key("model.tensor_model_parallel_size", DYNCP_FIELD(model.tensor_model_parallel_size),
               "Tensor-parallel size (tp): the fastest dimension of the world (tp x cp x dp, "
               "Megatron's order); each dp x cp pool rank is a TP group of tp ranks",
               {.rules = "divides the world / cp, num_attention_heads, num_key_value_heads, "
                         "vocab_size and the FFN sizes (the Gated DeltaNet heads in hybrids); "
                         "heads, FFN columns and vocabulary split over the TP group "
                         "(docs/dist.md, the tensor-parallel model)"}));
  keys.push_back(make_key(
      "model.pipeline_model_parallel_size", DYNCP_FIELD(model.pipeline_model_parallel_size),
      "Pipeline-parallel size (pp): the layers are split over pp stages, world = pp x dp x cp; "
      "1F1B, or interleaved 1F1B with virtual_pipeline_model_parallel_size",
      {.rules = ">= 1, divides the world"}));
  keys.push_back(make_key(
      "model.virtual_pipeline_model_parallel_size",
      DYNCP_FIELD(model.virtual_pipeline_model_parallel_size),
      "Virtual pipeline chunks per stage (interleaved 1F1B); unset: one chunk per stage",
      {.rules = "needs pp > 1; every stage's layers divide into it; a step's microbatches must "
                "be a multiple of pp"}));
  keys.push_back(
      make_key("model.num_layers_in_first_pipeline_stage",
               DYNCP_FIELD(model.num_layers_in_first_pipeline_stage),
               "Layers of the first pipeline stage (uneven split); unset: an even share",
               {.rules = ">= 1; the layers left divide evenly over the middle stages; not with "
                         "account_for_*_in_pipeline_split"}));
  keys.push_back(make_key("model.num_layers_in_last_pipeline_stage",
                          DYNCP_FIELD(model.num_layers_in_last_pipeline_stage),
                          "Layers of the last pipeline stage (uneven split); unset: an even share",
                          {.rules = ">= 1; as num_layers_in_first_pipeline_stage"}));
  keys.push_back(
      make_key("model.account_for_embedding_in_pipeline_split",
               DYNCP_FIELD(model.account_for_embedding_in_pipeline_split),
               "The embedding counts as one layer of the first stage in the pipeline split",
               {.rules = "num_hidden_layers + 1 (+ 1 with the loss) divisible by pp x vpp"}));
  keys.push_back(
      make_key("model.account_for_loss_in_pipeline_split",
               DYNCP_FIELD(model.account_for_loss_in_pipeline_split),
               "The loss counts as one layer of the last stage in the pipeline split",
               {.rules = "num_hidden_layers + 1 (+ 1 with the embedding) divisible by pp x vpp"}));
  keys.push_back(make_key("model.context_parallel_size", DYNCP_FIELD(model.context_parallel_size),
                          "Static context-parallel size (cp); dp = world size / cp",
                          {.rules = "must divide the world size"}));
  keys.push_back(make_key(
      "model.expert_model_parallel_size", DYNCP_FIELD(model.expert_model_parallel_size),
      "Expert-parallel size (ep) over the dp x cp pool; expert-data-parallel size = pool / ep",
      {.rules = "must divide the pool (dp x cp) and model.num_experts"}));
  keys.push_back(make_key("model.sequence_parallel", DYNCP_FIELD(model.sequence_parallel),
                          "Sequence parallelism inside a TP group: multiplies the alignment "
                          "multiple by tp (2c x tp on a group of c; pool rule 2 x dp x cp x tp)",
                          {.rules = "needs tensor_model_parallel_size > 1; like TP, accepted by "
                                    "--dry-run only"}));
  keys.push_back(make_key(
      "model.expert_tensor_parallel_size", DYNCP_FIELD(model.expert_tensor_parallel_size),
      "Tensor parallelism of the experts (etp): 1 = whole experts per EP rank, EP groups of ep "
      "consecutive world ranks; tp = each expert split over its TP group; unset: "
      "tensor_model_parallel_size, as Megatron",
      {.rules = "1 or tensor_model_parallel_size; etp x ep divides the world"}));
  keys.push_back(make_key("model.seq_length", DYNCP_FIELD(model.seq_length),
                          "Longest sample in tokens (after the chat template)",
                          {.max = detail::max_sequence_tokens,
                           .rules = "multiple of the alignment multiple; <= pool x "
                                    "model.max_seqlen_per_dp_cp_rank"}));
}

// The dynamic-CP, packing and scheduler keys of the layout (after the parallel sizes).
void append_packing_layout_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key(
      "model.dynamic_context_parallel", DYNCP_FIELD(model.dynamic_context_parallel),
      "Dynamic CP: each microbatch runs on CP groups sized for its sequences, drawn from the "
      "dp x cp pool",
      {.rules = "needs a power-of-two pool of >= 2 ranks and dist.use_decentralized_pg=false"}));
  keys.push_back(make_key("model.min_dynamic_context_parallel_size",
                          DYNCP_FIELD(model.min_dynamic_context_parallel_size),
                          "Smallest dynamic CP group size the scheduler may use",
                          {.rules = "power of two, <= pool size"}));
  keys.push_back(make_key(
      "model.max_seqlen_per_dp_cp_rank", DYNCP_FIELD(model.max_seqlen_per_dp_cp_rank),
      "Token capacity of one pool rank in one microbatch (sizes bins and CP groups)",
      {.max = detail::max_sequence_tokens,
       .rules = "must be set explicitly; pool x value >= seq_length (pool = cp static, dp x cp "
                "dynamic)"}));
  keys.push_back(make_key(
      "model.sequence_packing_scheduler", DYNCP_FIELD(model.sequence_packing_scheduler),
      "Packing scheduler; unset: default_dynamic_cp with dynamic CP, dp_balanced without",
      {.rules = "dp_balanced only with static CP; default_dynamic_cp and cost_aware only with "
                "dynamic CP; needs dataset.enable_global_batch_packing"}));
  keys.push_back(make_key(
      "model.cp_comm_type", DYNCP_FIELD(model.cp_comm_type),
      "How a CP group exchanges attention inputs: all_gather (K/V gathered), p2p (a ring of K/V "
      "blocks), a2a (all-to-all to whole sequences for a slice of the heads; DeltaNet layers "
      "too), a2a+p2p (all-to-all inside groups of hierarchical_context_parallel_sizes[0], a K/V "
      "ring across them)",
      {.rules = "a2a: num_attention_heads divisible by every a2a group size c, and "
                "num_key_value_heads divisible by c or c a multiple of it (K/V heads "
                "replicated); the same for linear_num_value_heads / linear_num_key_heads in "
                "hybrids; a2a+p2p needs hierarchical_context_parallel_sizes"}));
  keys.push_back(make_key(
      "model.hierarchical_context_parallel_sizes",
      DYNCP_FIELD(model.hierarchical_context_parallel_sizes),
      "a2a+p2p: [inner, outer] CP sizes: all-to-all inside each group of inner consecutive CP "
      "ranks (e.g. one node), a K/V ring over the outer ranks; a dynamic group of c ranks uses "
      "inner min(c, inner) and a ring of c / that",
      {.rules = "only with cp_comm_type=a2a+p2p (required there); two positive entries whose "
                "product is context_parallel_size"}));
  keys.push_back(make_key(
      "model.attention_backend", DYNCP_FIELD(model.attention_backend),
      "Attention implementation of the GPU path: fused (cuDNN's fused attention through "
      "cudnn-frontend), flash (this program's own kernel), auto (fused where cuDNN's support "
      "check passes for the model's attention shapes, else flash; the choice is logged once)",
      {.rules = "fused needs dist.device=cuda, mixed_precision=bf16_mixed, a binary built with "
                "cuDNN (not the emulated backend) and shapes cuDNN supports; the CPU path runs "
                "its own op whatever the value"}));
  keys.push_back(make_key(
      "model.calculate_per_token_loss", DYNCP_FIELD(model.calculate_per_token_loss),
      "Loss summed per token and normalised by the global token count", {.rules = "must be true"}));
  keys.push_back(make_key("model.moe_router_load_balancing_type",
                          DYNCP_FIELD(model.moe_router_load_balancing_type),
                          "MoE load-balancing loss (coefficient: model.router_aux_loss_coef)"));
  keys.push_back(make_key(
      "model.moe_router_force_load_balancing", DYNCP_FIELD(model.moe_router_force_load_balancing),
      "Uniform routing: each token's top-k experts follow from its position in its sequence "
      "(experts (position x k + j + layer) mod E), not from the router logits; the weights are "
      "still the router's probabilities of those experts, so the router still trains",
      {.rules = "a benchmarking switch (every expert gets the same load); routes through the "
                "unfused router and permutation on the GPU"}));
  keys.push_back(make_key(
      "model.moe_grouped_gemm", DYNCP_FIELD(model.moe_grouped_gemm),
      "GPU path: each expert projection (gate/up, down; forward, data and weight gradients) is "
      "one grouped launch over all local experts reading the expert offsets in device memory; "
      "false: one product per expert, the offsets copied to the host in every MoE layer",
      {.rules = "no effect on the CPU path (the same products either way)"}));
  keys.push_back(make_key(
      "model.moe_permute_fusion", DYNCP_FIELD(model.moe_permute_fusion),
      "GPU path: router top-k, the dispatch order and the permuted rows in one fused op (three "
      "launches, no host read); false: router, permutation plan and permutation as separate ops",
      {.rules = "no effect on the CPU path (the same numbers either way); on the GPU true takes "
                "top-k up to 32, false up to 1024 experts"}));
  keys.push_back(make_key(
      "model.moe_shared_expert_overlap", DYNCP_FIELD(model.moe_shared_expert_overlap),
      "Compute the hybrid's shared expert while the EP all-to-all of the routed rows is in "
      "flight (GPU: the all-to-all on the communicator's stream behind an event, the shared "
      "expert on the compute stream; CPU: the exchange posted non-blocking); the same numbers",
      {.rules = "refused for a model without a shared expert; overlaps only under expert "
                "parallelism (one EP rank has nothing in flight: the shared expert runs first)"}));
  keys.push_back(make_key("model.recompute_granularity", DYNCP_FIELD(model.recompute_granularity),
                          "Activation recomputation; unset: none",
                          {.rules = "full and selective are built"}));
  keys.push_back(
      make_key("model.recompute_method", DYNCP_FIELD(model.recompute_method),
               "Which layers full recomputation covers: uniform (every layer) or block (the first "
               "recompute_num_layers)",
               {.rules = "only with recompute_granularity=full; default uniform"}));
  keys.push_back(make_key(
      "model.recompute_num_layers", DYNCP_FIELD(model.recompute_num_layers),
      "uniform: layers per recomputation unit (each layer is recomputed on its own, the same "
      "work with no more memory); block: how many leading layers are recomputed (of each "
      "pipeline chunk, as Megatron)",
      {.rules = ">= 1; block: at most num_hidden_layers; only with recompute_granularity=full"}));
  keys.push_back(make_key(
      "model.recompute_modules", DYNCP_FIELD(model.recompute_modules),
      "Modules recomputed under selective recomputation: core_attn (nothing to drop: the "
      "attention keeps only out and lse), moe_act, layernorm, mlp, shared_experts; unset: "
      "[core_attn]",
      {.rules = "only with recompute_granularity=selective; Megatron's module names; mla_up_proj "
                "and moe are not built (running exits 2)"}));
}

void append_data_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key("dataset.type", DYNCP_FIELD(dataset.type), "Training data format",
                          {.rules = "mock_varlen needs dataset.mock_length_distribution; the "
                                    "others need dataset.data_path"}));
  keys.push_back(make_key("dataset.data_path", DYNCP_FIELD(dataset.data_path),
                          "Training data: JSONL file, or .bin/.idx prefix for megatron_indexed"));
  keys.push_back(make_key("dataset.validation_data_path", DYNCP_FIELD(dataset.validation_data_path),
                          "Held-out data for evaluation (same format as dataset.type)"));
  keys.push_back(make_key("dataset.seq_length", DYNCP_FIELD(dataset.seq_length),
                          "Dataset sequence cap; unset: model.seq_length",
                          {.max = detail::max_sequence_tokens,
                           .rules = "<= model.seq_length; multiple of the alignment multiple"}));
  keys.push_back(make_key("dataset.enable_global_batch_packing",
                          DYNCP_FIELD(dataset.enable_global_batch_packing),
                          "Pack each global batch online with the packing scheduler",
                          {.rules = "must be true: global-batch packing is the only data path"}));
  keys.push_back(make_key("dataset.dataloader_type", DYNCP_FIELD(dataset.dataloader_type),
                          "Loader kind", {.rules = "single or cyclic"}));
  keys.push_back(make_key("dataset.fold_alignment_padding",
                          DYNCP_FIELD(dataset.fold_alignment_padding),
                          "Report each padded length as the sequence length, so bins have no "
                          "padding between sequences"));
  keys.push_back(make_key(
      "dataset.global_batch_packing_pad_to_multiple_of",
      DYNCP_FIELD(dataset.global_batch_packing_pad_to_multiple_of),
      "Per-sequence alignment multiple; unset: derived (2 x dp x cp dynamic, 2 x cp static, 1 "
      "without CP)",
      {.max = detail::max_sequence_tokens,
       .rules = "a multiple of the derived alignment multiple"}));
  keys.push_back(make_key("dataset.cache_dir", DYNCP_FIELD(dataset.cache_dir),
                          "Folder for prepared (tokenized, indexed) data"));
  keys.push_back(make_key("dataset.truncation", DYNCP_FIELD(dataset.truncation),
                          "A sample longer than seq_length is dropped, truncated, or an error"));
  keys.push_back(make_key("dataset.on_bad_sample", DYNCP_FIELD(dataset.on_bad_sample),
                          "A malformed sample is an error, or skipped with a warning"));
  keys.push_back(
      make_key("dataset.shuffle", DYNCP_FIELD(dataset.shuffle),
               "Shuffle samples each epoch (seeded by rng.seed, resumable), whatever the "
               "loader type; false: file order",
               {.rules = "false needs dataloader_type single"}));
  keys.push_back(make_key(
      "dataset.num_workers", DYNCP_FIELD(dataset.num_workers),
      "Threads that parse, render and tokenize JSONL records while the data cache is prepared "
      "(0 or 1: the preparing process's own thread); the cache is the same for any count",
      {.min = 0, .max = 256}));
  keys.push_back(
      make_key("dataset.mock_length_distribution", DYNCP_FIELD(dataset.mock_length_distribution),
               "mock_varlen lengths: lognormal(min=,max=,mean=,sigma=), uniform(min=,max=) or "
               "fixed(length=)",
               {.rules = "max <= seq_length"}));
  keys.push_back(make_key("dataset.mock_num_samples", DYNCP_FIELD(dataset.mock_num_samples),
                          "Number of mock_varlen samples", {.max = detail::max_mock_samples}));
  keys.push_back(make_key("dataset.chat_template_kwargs", DYNCP_FIELD(dataset.chat_template_kwargs),
                          "chat_jsonl: extra chat-template variables as a JSON object, e.g. "
                          "{\"enable_thinking\": false} (apply_chat_template's **kwargs)",
                          {.rules = "a JSON object"}));
  keys.push_back(make_key("dataset.chat_messages_key", DYNCP_FIELD(dataset.chat_messages_key),
                          "chat_jsonl: key of a sample's message list; empty: messages, else "
                          "ShareGPT conversations"));
  keys.push_back(make_key("dataset.chat_role_key", DYNCP_FIELD(dataset.chat_role_key),
                          "chat_jsonl: key of a message's role; empty: role (from for "
                          "conversations)"));
  keys.push_back(make_key("dataset.chat_content_key", DYNCP_FIELD(dataset.chat_content_key),
                          "chat_jsonl: key of a message's text; empty: content (value for "
                          "conversations)"));
  keys.push_back(make_key("dataset.chat_role_names", DYNCP_FIELD(dataset.chat_role_names),
                          "chat_jsonl: extra role names, name=role pairs separated by commas "
                          "(roles: system, user, assistant, tool)",
                          {.rules = "name=role pairs"}));
  keys.push_back(make_key("tokenizer.tokenizer_type", DYNCP_FIELD(tokenizer.tokenizer_type),
                          "HuggingFaceTokenizer reads tokenizer.json; NullTokenizer for "
                          "pre-tokenized or mock data",
                          {.rules = "chat_jsonl needs HuggingFaceTokenizer"}));
  keys.push_back(make_key("tokenizer.tokenizer_model", DYNCP_FIELD(tokenizer.tokenizer_model),
                          "tokenizer.json or a folder holding it; empty: model.hf_model_path",
                          {.rules = "chat_jsonl needs it or model.hf_model_path"}));
  keys.push_back(make_key("tokenizer.chat_template", DYNCP_FIELD(tokenizer.chat_template),
                          "Chat template for chat_jsonl: qwen_chatml renders with the tokenizer's "
                          "own template (tokenizer_config.json or chat_template.jinja, any HF "
                          "template); assistant tokens carry the loss"));
}

void append_training_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key("train.micro_batch_size", DYNCP_FIELD(train.micro_batch_size),
                          "Samples per loader microbatch (the scheduler packs them)",
                          {.rules = "must be 1"}));
  keys.push_back(make_key("train.global_batch_size", DYNCP_FIELD(train.global_batch_size),
                          "Samples per optimizer step",
                          {.max = detail::max_global_batch_size, .rules = "divisible by dp"}));
  keys.push_back(make_key("train.train_iters", DYNCP_FIELD(train.train_iters), "Optimizer steps"));
  keys.push_back(make_key("train.stop_on_nan", DYNCP_FIELD(train.stop_on_nan),
                          "Stop with an error when the loss or gradient norm is not finite"));
  keys.push_back(make_key("validation.eval_interval", DYNCP_FIELD(validation.eval_interval),
                          "Evaluate every this many steps (and after the last); unset: never",
                          {.rules = "needs dataset.validation_data_path unless dataset.type is "
                                    "mock_varlen (held-out mock samples are drawn then)"}));
  keys.push_back(make_key("validation.eval_iters", DYNCP_FIELD(validation.eval_iters),
                          "Global batches per evaluation (the same held-out batches every time)",
                          {.min = 0}));
  keys.push_back(make_key("optimizer.optimizer", DYNCP_FIELD(optimizer.optimizer),
                          "Optimizer (AdamW with decoupled weight decay)"));
  keys.push_back(
      make_key("optimizer.lr", DYNCP_FIELD(optimizer.lr), "Peak learning rate", {.rules = "> 0"}));
  keys.push_back(make_key("optimizer.min_lr", DYNCP_FIELD(optimizer.min_lr),
                          "Learning rate at the end of decay", {.rules = ">= 0, <= optimizer.lr"}));
  keys.push_back(make_key("optimizer.weight_decay", DYNCP_FIELD(optimizer.weight_decay),
                          "Decoupled weight decay", {.rules = ">= 0"}));
  keys.push_back(make_key("optimizer.adam_beta1", DYNCP_FIELD(optimizer.adam_beta1), "Adam beta1",
                          {.rules = "in [0, 1)"}));
  keys.push_back(make_key("optimizer.adam_beta2", DYNCP_FIELD(optimizer.adam_beta2), "Adam beta2",
                          {.rules = "in [0, 1)"}));
  keys.push_back(make_key("optimizer.adam_eps", DYNCP_FIELD(optimizer.adam_eps), "Adam epsilon",
                          {.rules = "> 0"}));
  keys.push_back(make_key("optimizer.clip_grad", DYNCP_FIELD(optimizer.clip_grad),
                          "Global gradient-norm clip; 0: off", {.rules = ">= 0"}));
  keys.push_back(make_key("optimizer.use_precision_aware_optimizer",
                          DYNCP_FIELD(optimizer.use_precision_aware_optimizer),
                          "Keep optimizer state in the dtypes below"));
  keys.push_back(make_key("optimizer.exp_avg_dtype", DYNCP_FIELD(optimizer.exp_avg_dtype),
                          "Adam first-moment dtype (bfloat16: stored in bf16, updated in fp32)",
                          {.rules = "bfloat16 needs use_precision_aware_optimizer"}));
  keys.push_back(make_key("optimizer.exp_avg_sq_dtype", DYNCP_FIELD(optimizer.exp_avg_sq_dtype),
                          "Adam second-moment dtype (bfloat16: stored in bf16, updated in fp32)",
                          {.rules = "bfloat16 needs use_precision_aware_optimizer"}));
  keys.push_back(make_key("scheduler.lr_decay_style", DYNCP_FIELD(scheduler.lr_decay_style),
                          "Learning-rate decay after warm-up"));
  keys.push_back(make_key("scheduler.lr_warmup_iters", DYNCP_FIELD(scheduler.lr_warmup_iters),
                          "Linear warm-up steps", {.min = 0, .rules = "<= lr_decay_iters"}));
  keys.push_back(make_key("scheduler.lr_warmup_init", DYNCP_FIELD(scheduler.lr_warmup_init),
                          "Learning rate at step 0 of warm-up", {.rules = ">= 0"}));
  keys.push_back(make_key("scheduler.lr_decay_iters", DYNCP_FIELD(scheduler.lr_decay_iters),
                          "Steps until min_lr; unset: train.train_iters"));
  keys.push_back(make_key("scheduler.start_weight_decay", DYNCP_FIELD(scheduler.start_weight_decay),
                          "Weight decay at step 0; unset: optimizer.weight_decay",
                          {.rules = ">= 0"}));
  keys.push_back(make_key("scheduler.end_weight_decay", DYNCP_FIELD(scheduler.end_weight_decay),
                          "Weight decay at the end; unset: optimizer.weight_decay",
                          {.rules = ">= 0"}));
  keys.push_back(make_key("scheduler.weight_decay_incr_style",
                          DYNCP_FIELD(scheduler.weight_decay_incr_style),
                          "How weight decay moves from start to end"));
  keys.push_back(make_key("scheduler.override_opt_param_scheduler",
                          DYNCP_FIELD(scheduler.override_opt_param_scheduler),
                          "On resume, take the schedule from this config, not the checkpoint"));
}

// The modelled GPU step's table (docs/step-model.md): peaks, efficiencies, latencies.
void append_step_model_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key(
      "packing.step_model_deltanet_kernel", DYNCP_FIELD(packing.step_model_deltanet_kernel),
      "Modelled step: the Gated DeltaNet kernel priced, chunked (WY form, chunks of 64 tokens on "
      "tensor cores) or token_by_token (the recurrence one token at a time); --dry-run prints "
      "both"));
  const auto rate = [&](const char* path, auto access, const char* doc) {
    keys.push_back(make_key(path, access, doc, {.rules = "> 0"}));
  };
  rate("packing.step_model_bf16_flops_per_second",
       DYNCP_FIELD(packing.step_model_bf16_flops_per_second),
       "Modelled step: bf16 dense tensor-core peak of one device, FLOP/s");
  rate("packing.step_model_fp32_flops_per_second",
       DYNCP_FIELD(packing.step_model_fp32_flops_per_second),
       "Modelled step: fp32 (non-tensor) peak of one device, FLOP/s");
  rate("packing.step_model_memory_bytes_per_second",
       DYNCP_FIELD(packing.step_model_memory_bytes_per_second),
       "Modelled step: device memory bandwidth, bytes/s");
  keys.push_back(make_key("packing.step_model_launch_latency_seconds",
                          DYNCP_FIELD(packing.step_model_launch_latency_seconds),
                          "Modelled step: cost of one kernel launch in a dependent chain, s",
                          {.rules = ">= 0"}));
  const auto efficiency = [&](const char* path, auto access, const char* doc) {
    keys.push_back(make_key(path, access, doc, {.rules = "> 0 and <= 1"}));
  };
  efficiency("packing.step_model_dense_gemm_efficiency",
             DYNCP_FIELD(packing.step_model_dense_gemm_efficiency),
             "Modelled step: fraction of the matrix peak dense GEMMs reach");
  efficiency("packing.step_model_expert_gemm_efficiency",
             DYNCP_FIELD(packing.step_model_expert_gemm_efficiency),
             "Modelled step: fraction of the matrix peak expert GEMMs reach");
  efficiency("packing.step_model_attention_efficiency",
             DYNCP_FIELD(packing.step_model_attention_efficiency),
             "Modelled step: fraction of the matrix peak the attention kernels reach");
  efficiency("packing.step_model_deltanet_efficiency",
             DYNCP_FIELD(packing.step_model_deltanet_efficiency),
             "Modelled step: fraction of the peak the Gated DeltaNet kernels reach (the matrix "
             "peak chunked, the fp32 peak token by token)");
  efficiency(
      "packing.step_model_cross_entropy_efficiency",
      DYNCP_FIELD(packing.step_model_cross_entropy_efficiency),
      "Modelled step: fraction of the matrix peak the fused LM head + cross-entropy reaches");
  efficiency("packing.step_model_memory_efficiency",
             DYNCP_FIELD(packing.step_model_memory_efficiency),
             "Modelled step: fraction of the memory bandwidth every kernel's traffic reaches");
  rate("packing.step_model_deltanet_token_step_seconds",
       DYNCP_FIELD(packing.step_model_deltanet_token_step_seconds),
       "Modelled step: latency of one token of the token-by-token gated delta rule, s");
  rate("packing.step_model_deltanet_chunk_step_seconds",
       DYNCP_FIELD(packing.step_model_deltanet_chunk_step_seconds),
       "Modelled step: latency of one 64-token chunk of the chunked state recurrence, s");
}

void append_runtime_keys(std::vector<KeySpec>& keys) {
  keys.push_back(make_key("ddp.average_in_collective", DYNCP_FIELD(ddp.average_in_collective),
                          "Average (instead of sum) gradients in the collective",
                          {.rules = "must be false (per-token loss normalises by token count)"}));
  keys.push_back(make_key("ddp.use_distributed_optimizer",
                          DYNCP_FIELD(ddp.use_distributed_optimizer),
                          "Shard optimizer state: dense over the pool, experts over expert-dp"));
  keys.push_back(make_key(
      "ddp.overlap_grad_reduce", DYNCP_FIELD(ddp.overlap_grad_reduce),
      "Sum gradients in buckets of ddp.bucket_size while the step's last backward runs, the last "
      "layers' buckets first: all-reduced, or with ddp.use_distributed_optimizer reduced to the "
      "ranks owning their pieces (GPU: on the communicators' streams behind events, the "
      "optimizer waiting by events; CPU: on a communication thread with its own "
      "communicators); the same sums bit for bit"));
  keys.push_back(make_key(
      "ddp.overlap_param_gather", DYNCP_FIELD(ddp.overlap_param_gather),
      "Distributed optimizer: gather the updated parameters in the gradient buckets while the "
      "next forward runs, each layer's forward waiting for the buckets holding its parameters "
      "(GPU: by events on the compute stream; CPU: for a communication thread); evaluation, "
      "checkpoints and the export wait for all of them; the same values bit for bit",
      {.rules = "needs ddp.use_distributed_optimizer and ddp.overlap_grad_reduce (as in "
                "Megatron)"}));
  keys.push_back(make_key(
      "ddp.bucket_size", DYNCP_FIELD(ddp.bucket_size),
      "Elements per bucket of ddp.overlap_grad_reduce and ddp.overlap_param_gather; unset: "
      "max(40,000,000, 1,000,000 x pool size), Megatron's default",
      {.rules = "used only with overlap_grad_reduce (as in Megatron: without it the gradient is "
                "reduced in one pass after the backward)"}));
  keys.push_back(make_key("dist.use_decentralized_pg", DYNCP_FIELD(dist.use_decentralized_pg),
                          "Megatron's decentralized process groups",
                          {.rules = "must be false (dynamic CP groups come from the parallel "
                                    "state)"}));
  keys.push_back(make_key("dist.device", DYNCP_FIELD(dist.device),
                          "Device of each rank: one GPU per rank by local rank; auto = cuda when "
                          "the binary has a CUDA backend and sees a GPU, else cpu",
                          {.rules = "cuda without a visible GPU, or with a feature the GPU path "
                                    "lacks (docs/cuda.md), is refused by training (exit 2)"}));
  keys.push_back(make_key("dist.eager_dynamic_cp_groups", DYNCP_FIELD(dist.eager_dynamic_cp_groups),
                          "Create every dynamic CP communicator at start-up instead of on first "
                          "use"));
  keys.push_back(make_key("dist.distributed_timeout_minutes",
                          DYNCP_FIELD(dist.distributed_timeout_minutes),
                          "Collective timeout before the job is aborted", {.max = 10080}));
  keys.push_back(make_key("checkpoint.pretrained_checkpoint",
                          DYNCP_FIELD(checkpoint.pretrained_checkpoint),
                          "HF safetensors folder with the initial weights; empty: random init"));
  keys.push_back(make_key("checkpoint.save", DYNCP_FIELD(checkpoint.save),
                          "Folder for training checkpoints; empty: none"));
  keys.push_back(
      make_key("checkpoint.load", DYNCP_FIELD(checkpoint.load),
               "Checkpoint folder to resume from (its newest verified checkpoint); empty: "
               "checkpoint.save when it holds checkpoints, else start fresh"));
  keys.push_back(make_key("checkpoint.ckpt_step", DYNCP_FIELD(checkpoint.ckpt_step),
                          "Resume from exactly this iteration's checkpoint; unset: the newest",
                          {.min = 0, .rules = "needs a checkpoint folder to load from"}));
  keys.push_back(make_key("checkpoint.overwrite", DYNCP_FIELD(checkpoint.overwrite),
                          "Let a run that does not resume from checkpoint.save write into it "
                          "although it holds checkpoints (newer ones are kept, latest moves)"));
  keys.push_back(make_key("checkpoint.save_interval", DYNCP_FIELD(checkpoint.save_interval),
                          "Save every this many steps; unset: at the end only (when save is set)"));
  keys.push_back(make_key("checkpoint.most_recent_k", DYNCP_FIELD(checkpoint.most_recent_k),
                          "Checkpoints to keep; -1: all",
                          {.min = -1, .rules = "-1 or >= 1", .aliases = {"checkpoint.keep"}}));
  keys.push_back(make_key("checkpoint.export_hf", DYNCP_FIELD(checkpoint.export_hf),
                          "Folder for an HF safetensors export at the end; empty: none"));
  keys.push_back(
      make_key("checkpoint.sharded", DYNCP_FIELD(checkpoint.sharded),
               "Every rank writes the state it owns into its own file, in parallel, "
               "with an index (checkpoint format 3, like Megatron's torch_dist); false: rank 0 "
               "writes everything into safetensors files (format 2)"));
  keys.push_back(make_key("checkpoint.async_save", DYNCP_FIELD(checkpoint.async_save),
                          "Write each checkpoint from a host snapshot on a background thread "
                          "while training goes on (sharded checkpoints only)"));
  keys.push_back(make_key("logger.log_interval", DYNCP_FIELD(logger.log_interval),
                          "Steps between console metric lines"));
  keys.push_back(make_key("logger.metrics_path", DYNCP_FIELD(logger.metrics_path),
                          "JSONL file receiving every step's metrics; empty: none"));
  keys.push_back(make_key("logger.tensorboard_dir", DYNCP_FIELD(logger.tensorboard_dir),
                          "Folder for TensorBoard event files (rank 0, every step); empty: none"));
  keys.push_back(make_key(
      "logger.wandb_project", DYNCP_FIELD(logger.wandb_project),
      "W&B project: rank 0 starts tools/wandb_sidecar.py, which logs the metrics JSONL to W&B "
      "while the job runs; empty: no W&B",
      {.rules = "needs logger.metrics_path and logger.wandb_exp_name"}));
  keys.push_back(make_key("logger.wandb_entity", DYNCP_FIELD(logger.wandb_entity),
                          "W&B team or user of the run; empty: the W&B default",
                          {.rules = "needs logger.wandb_project"}));
  keys.push_back(make_key("logger.wandb_exp_name", DYNCP_FIELD(logger.wandb_exp_name),
                          "W&B run name", {.rules = "needs logger.wandb_project"}));
  keys.push_back(make_key(
      "logger.wandb_save_dir", DYNCP_FIELD(logger.wandb_save_dir),
      "Folder for W&B's local files (offline runs to sync); empty: <checkpoint.save>/wandb, "
      "else beside logger.metrics_path",
      {.rules = "needs logger.wandb_project"}));
  keys.push_back(make_key("rng.seed", DYNCP_FIELD(rng.seed),
                          "Seed of every random draw (init, shuffling, mock data)",
                          {.min = 0, .max = std::numeric_limits<std::int64_t>::max()}));
  keys.push_back(make_key(
      "packing.alignment", DYNCP_FIELD(packing.alignment),
      "Dynamic-CP padding: per_group pads each sequence to a multiple of 2c for the group of c "
      "ranks it runs on (none on one rank); pool pads every sequence to 2 x dp x cp "
      "(Megatron-Core). Static CP pads to 2 x cp either way",
      {.rules = "per_group: dataset.global_batch_packing_pad_to_multiple_of, if set, must equal "
                "2 x dp x cp"}));
  keys.push_back(make_key("packing.device_flops_per_second",
                          DYNCP_FIELD(packing.device_flops_per_second),
                          "Cost model: achieved FLOP/s of one device", {.rules = "> 0"}));
  keys.push_back(
      make_key("packing.link_bytes_per_second", DYNCP_FIELD(packing.link_bytes_per_second),
               "Cost model: CP link bandwidth per direction, bytes/s", {.rules = "> 0"}));
  keys.push_back(make_key(
      "packing.collective_latency_seconds", DYNCP_FIELD(packing.collective_latency_seconds),
      "Cost model: fixed latency of one collective step, s", {.rules = ">= 0"}));
  keys.push_back(make_key("packing.microbatch_overhead_seconds",
                          DYNCP_FIELD(packing.microbatch_overhead_seconds),
                          "Cost model: fixed cost of one microbatch, s", {.rules = ">= 0"}));
  append_step_model_keys(keys);
  keys.push_back(make_key("mixed_precision", DYNCP_FIELD(mixed_precision),
                          "Compute precision: fp32, or bf16_mixed (Megatron-Bridge's: matrix "
                          "products and attention on bf16 weights and activations, fp32 master "
                          "weights, main_grad and reductions; docs/precision.md)"));
}

std::vector<KeySpec> build_table() {
  std::vector<KeySpec> keys;
  append_parallel_keys(keys);
  append_packing_layout_keys(keys);
  detail::append_model_architecture_keys(keys);
  append_data_keys(keys);
  append_training_keys(keys);
  append_runtime_keys(keys);
  return keys;
}

}  // namespace

const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(const std::string& path) {
  for (const auto& spec : key_table()) {
    if (spec.path == path) return &spec;
    for (const auto& alias : spec.aliases) {
      if (alias == path) return &spec;
    }
  }
  return nullptr;
}

std::vector<std::string> all_key_names() {
  std::vector<std::string> names;
  for (const auto& spec : key_table()) {
    names.push_back(spec.path);
    names.insert(names.end(), spec.aliases.begin(), spec.aliases.end());
  }
  for (const auto& inert : inert_keys()) names.push_back(inert.path);
  return names;
}

std::string type_name(const KeySpec& spec) {
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return "[" + out + "]";
  };
  auto range = [&spec]() -> std::string {
    if (spec.max_integer >= detail::max_size) {
      return " >= " + std::to_string(spec.min_integer);
    }
    return " in [" + std::to_string(spec.min_integer) + ", " + std::to_string(spec.max_integer) +
           "]";
  };
  std::string name;
  switch (spec.type) {
    case KeyType::boolean:
      name = "boolean";
      break;
    case KeyType::integer:
      name = "integer" + range();
      break;
    case KeyType::number:
      name = "number";
      break;
    case KeyType::string:
      name = "string";
      break;
    case KeyType::choice:
      name = "one of " + join(spec.choices);
      break;
    case KeyType::integer_list:
      name = "list of integers" + range();
      break;
    case KeyType::choice_list:
      name = spec.choices.empty() ? "list of strings" : "list of " + join(spec.choices);
      break;
  }
  return spec.nullable ? name + " or null" : name;
}

namespace {

std::string format_number(double value) {
  // Shortest text that reads back to the same double, always recognisable as a float.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string format_value(const KeyValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_number(d); }
    std::string operator()(const std::string& s) const { return s.empty() ? "\"\"" : s; }
    std::string operator()(const std::vector<std::int64_t>& list) const {
      std::string out;
      for (const auto item : list) out += (out.empty() ? "" : ", ") + std::to_string(item);
      return "[" + out + "]";
    }
    std::string operator()(const std::vector<std::string>& list) const {
      std::string out;
      for (const auto& item : list) out += (out.empty() ? "" : ", ") + item;
      return "[" + out + "]";
    }
  };
  return std::visit(Visitor{}, value);
}

}  // namespace dyncp::config
