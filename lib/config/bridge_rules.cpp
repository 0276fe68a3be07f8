// The classification of every Megatron-Bridge field (bridge_fields.inc), one rule per line:
//
//   CLASS PATTERN [-> TARGET] [= V1|V2|...] [: NOTE]
//
// CLASS is honoured (H), inert (I) or refused (R). PATTERN is a field path or a prefix ending in
// '*' (an exact pattern beats a prefix; a longer prefix beats a shorter one). TARGET is this
// program's key (`special`: translated in bridge_reader.cpp). For R, the values after '=' are the
// supported ones (none listed: Bridge's default); NOTE names the feature a refused value asks
// for, what an inert knob is, or how an honoured field maps. tests/config/bridge_table_test.cpp
// checks that every field has a rule and every rule a field.

#include <sstream>

#include "config/bridge_fields.hpp"
#include "core/error.hpp"

namespace dyncp::config {

namespace {

constexpr const char* rule_text = R"(
H rng.seed -> rng.seed
I rng.te_rng_tracker : TE's RNG tracker (one generator here)
I rng.inference_rng_tracker : inference RNG
R rng.data_parallel_random_init : a different random init per data-parallel rank
I rerun_state_machine.* : result-validation reruns and fault injection
H train.micro_batch_size -> train.micro_batch_size
H train.global_batch_size -> train.global_batch_size
H train.train_iters -> train.train_iters
H train.eval_iters -> special : validation.eval_iters when set (Bridge copies the deprecated spelling over ValidationConfig's)
H train.eval_interval -> special : validation.eval_interval when set (Bridge copies the deprecated spelling over ValidationConfig's)
R train.skip_train = null|false : skipping training
R train.rampup_batch_size : batch-size ramp-up
R train.step_batch_size_schedule : a batch-size schedule
R train.train_samples : sample-count runs (set train_iters)
R train.exit_interval : stopping before train_iters (set train_iters)
R train.iterations_to_skip : skipped iterations
R train.num_epochs : epoch-count runs (set train_iters)
I train.decrease_batch_size_if_needed : memory, GC, signal, sync and sanity-check knobs
I train.empty_unused_memory_level : memory, GC, signal, sync and sanity-check knobs
I train.check_weight_hash_across_dp_replicas_interval : memory, GC, signal, sync and sanity-check knobs
I train.gpu_sniff_test_interval : memory, GC, signal, sync and sanity-check knobs
I train.train_sync_interval : memory, GC, signal, sync and sanity-check knobs
I train.exit_duration_in_mins : memory, GC, signal, sync and sanity-check knobs
I train.exit_signal_handler : memory, GC, signal, sync and sanity-check knobs
I train.exit_signal : memory, GC, signal, sync and sanity-check knobs
I train.exit_signal_handler_for_dataloader : memory, GC, signal, sync and sanity-check knobs
I train.exit_signal_handler_for_training : memory, GC, signal, sync and sanity-check knobs
I train.manual_gc : memory, GC, signal, sync and sanity-check knobs
I train.manual_gc_interval : memory, GC, signal, sync and sanity-check knobs
I train.manual_gc_eval : memory, GC, signal, sync and sanity-check knobs
I train.check_optimizer_step_success : memory, GC, signal, sync and sanity-check knobs
I train.skip_sync_grad_norm_across_mp : memory, GC, signal, sync and sanity-check knobs
H model.tensor_model_parallel_size -> model.tensor_model_parallel_size
H model.pipeline_model_parallel_size -> model.pipeline_model_parallel_size
H model.context_parallel_size -> model.context_parallel_size
H model.expert_model_parallel_size -> model.expert_model_parallel_size
H model.sequence_parallel -> model.sequence_parallel
H model.seq_length -> model.seq_length
H model.max_seqlen_per_dp_cp_rank -> model.max_seqlen_per_dp_cp_rank
H model.dynamic_context_parallel -> model.dynamic_context_parallel
H model.min_dynamic_context_parallel_size -> model.min_dynamic_context_parallel_size
H model.sequence_packing_scheduler -> model.sequence_packing_scheduler
R model.hybrid_context_parallel = false : the deprecated hybrid CP switch (set dynamic_context_parallel: true)
H model.cp_comm_type -> special : model.cp_comm_type (null: this program's default)
H model.hierarchical_context_parallel_sizes -> special : model.hierarchical_context_parallel_sizes (null: unset)
H model.calculate_per_token_loss -> model.calculate_per_token_loss
H model.moe_router_load_balancing_type -> special : model.moe_router_load_balancing_type (aux_loss or none)
H model.recompute_granularity -> model.recompute_granularity
H model.recompute_method -> model.recompute_method
H model.recompute_num_layers -> model.recompute_num_layers
H model.recompute_modules -> special : model.recompute_modules (null: [core_attn], Megatron's default)
I model.distribute_saved_activations : saved activations split over TP ranks
H model.hf_model_id -> special : model.hf_model_path, an Org/Name found in the local HF cache
H model.hf_model_revision -> special : the cache snapshot of hf_model_id (null: refs/main)
H model.num_layers -> model.num_hidden_layers
H model.hidden_size -> model.hidden_size
H model.ffn_hidden_size -> special : model.intermediate_size (null: 4 x hidden_size)
H model.num_attention_heads -> model.num_attention_heads
H model.num_query_groups -> special : model.num_key_value_heads (null: num_attention_heads)
H model.kv_channels -> special : model.head_dim (null: hidden_size / num_attention_heads)
H model.layernorm_epsilon -> model.rms_norm_eps
H model.rotary_base -> model.rope_theta
H model.rotary_percent -> model.partial_rotary_factor
H model.add_qkv_bias -> model.attention_bias
H model.share_embeddings_and_output_weights -> model.tie_word_embeddings
H model.vocab_size -> special : model.vocab_size (null: from hf_model_id)
H model.num_moe_experts -> special : model.num_experts (null: dense)
H model.moe_router_topk -> model.num_experts_per_tok
H model.moe_ffn_hidden_size -> special : model.moe_intermediate_size (null: ffn_hidden_size)
H model.moe_aux_loss_coeff -> model.router_aux_loss_coef
H model.moe_shared_expert_intermediate_size -> special : model.shared_expert_intermediate_size (null: none)
H model.moe_router_pre_softmax -> special : model.norm_topk_prob = not moe_router_pre_softmax
H model.moe_layer_freq -> special : 1 or a 0/1 list (0 entries: model.mlp_only_layers)
H model.experimental_attention_variant -> special : null: qwen3_moe; gated_delta_net: the Qwen3-Next / Qwen3.5 hybrid (dsa refused)
H model.linear_attention_freq -> special : model.full_attention_interval (or a 0/1 list: model.layer_types)
H model.linear_conv_kernel_dim -> model.linear_conv_kernel_dim
H model.linear_key_head_dim -> model.linear_key_head_dim
H model.linear_value_head_dim -> model.linear_value_head_dim
H model.linear_num_key_heads -> model.linear_num_key_heads
H model.linear_num_value_heads -> model.linear_num_value_heads
H model.layernorm_zero_centered_gamma -> special : must match the family (true for the hybrid, false for qwen3_moe)
H model.attention_output_gate -> special : must match the family (true for the hybrid, false for qwen3_moe)
H model.moe_shared_expert_gate -> special : must match the family (true for the hybrid with a shared expert)
R model.qk_layernorm = true : attention without QK RMSNorm (Qwen3 uses it)
R model.normalization = RMSNorm : another normalization
R model.gated_linear_unit = true : a non-gated MLP
R model.activation_func = silu : another MLP activation
R model.add_bias_linear = false : linear-layer biases
R model.position_embedding_type = rope : another position embedding
R model.hidden_dropout = 0|0.0 : dropout
R model.attention_dropout = 0|0.0 : attention dropout
R model.init_method_std = 0.02 : another init std (random init draws N(0, 0.02))
R model.init_method : a custom init function
R model.output_layer_init_method : a custom init function
R model.embedding_init_method : a custom init function
R model.embedding_init_method_std : a separate embedding init std
R model.use_mup : muP parametrisation
I model.mup_* : muP scales (used only with use_mup)
R model.apply_query_key_layer_scaling : query-key layer scaling
R model.fp16 = false : fp16 training
I model.bf16 : set from mixed_precision by Bridge
R model.params_dtype = torch.float32|torch.bfloat16 : fp16 parameters
I model.autocast_dtype : set from mixed_precision by Bridge
I model.pipeline_dtype : PP communication dtype
I model.enable_autocast : set from mixed_precision by Bridge
R model.fp8 : FP8 training
R model.fp8_param : FP8 parameters
I model.fp8_* : FP8 recipe details (used only with fp8)
R model.fp4 : FP4 training
R model.fp4_param : FP4 parameters
I model.fp4_* : FP4 recipe details (used only with fp4)
I model.first_last_layers_bf16 : FP8/FP4 layer exemptions
I model.activation_func_fp8_input_store : FP8 activation storage (used only with fp8)
I model.num_layers_at_start_in_bf16 : FP8/FP4 layer exemptions
I model.num_layers_at_end_in_bf16 : FP8/FP4 layer exemptions
R model.use_kitchen : NVIDIA Kitchen quantized layers
R model.use_kitchen_attention : Kitchen attention
I model.kitchen_attention_backend : Kitchen attention backend (used only with use_kitchen_attention)
R model.quant_recipe : a quantization recipe
R model.mtp_num_layers : multi-token prediction (MTP)
R model.mtp_enabled = false : multi-token prediction (MTP)
R model.mtp_standalone = false : multi-token prediction (MTP)
R model.mtp_use_repeated_layer = false : multi-token prediction (MTP)
R model.mtp_detach_heads = false : multi-token prediction (MTP)
R model.mtp_hybrid_override_pattern : multi-token prediction (MTP)
I model.mtp_loss_scaling_factor : MTP loss weight (used only with MTP)
I model.mtp_grad_scale_func : runtime callback
R model.multi_latent_attention = false : multi-latent attention (MLA)
I model.dsa_* : DeepSeek sparse attention settings (used only with experimental_attention_variant=dsa)
R model.experimental_attention_variant_loss_scale_func : an attention-variant loss
H model.num_layers_in_first_pipeline_stage -> model.num_layers_in_first_pipeline_stage
H model.num_layers_in_last_pipeline_stage -> model.num_layers_in_last_pipeline_stage
R model.pipeline_model_parallel_layout : a pipeline layout
H model.virtual_pipeline_model_parallel_size -> model.virtual_pipeline_model_parallel_size
H model.expert_tensor_parallel_size -> model.expert_tensor_parallel_size
R model.expert_tensor_parallel_num_weight_shards : expert tensor parallelism
R model.tensor_parallel_num_weight_shards : tensor-parallel weight sharding
R model.softmax_scale : a custom attention softmax scale
R model.softmax_type = vanilla : off-by-one or learnable softmax
R model.fp32_residual_connection : an fp32 residual stream
R model.apply_residual_connection_post_layernorm : post-norm residuals
R model.glu_linear_offset = 0|0.0 : a GLU offset
R model.activation_func_clamp_value : a clamped activation
R model.rotary_interleaved : interleaved RoPE
R model.window_size : sliding-window attention
R model.window_attn_skip_freq : sliding-window attention
R model.qk_l2_norm : QK L2 normalisation
R model.qk_clip : QK clipping
I model.qk_clip_alpha : QK clip setting (used only with qk_clip)
I model.qk_clip_threshold : QK clip setting (used only with qk_clip)
I model.log_max_attention_logit : a logging switch
I model.test_mode : a Megatron test switch
R model.no_rope_freq : NoPE layers
R model.moe_shared_expert_glu_interleave_size : interleaved shared-expert GLU weights
R model.moe_mlp_glu_interleave_size : interleaved expert GLU weights
R model.moe_enable_routing_replay : routing replay
R model.moe_router_topk_limited_devices : device-limited routing
R model.moe_router_num_groups : group-limited routing
R model.moe_router_group_topk : group-limited routing
R model.moe_router_topk_scaling_factor : scaled top-k weights
R model.moe_router_score_function = softmax : sigmoid routing scores
R model.moe_router_dtype = null|fp32 : an fp64 router
R model.moe_router_enable_expert_bias : expert-bias (aux-loss-free) balancing
I model.moe_router_bias_update_rate : expert-bias update rate (used only with moe_router_enable_expert_bias)
I model.moe_router_quantile_balancing_ema : a balancing statistic (used only with quantile balancing)
H model.moe_router_force_load_balancing -> model.moe_router_force_load_balancing
R model.moe_router_force_biased : forced biased routing (benchmarking)
R model.moe_z_loss_coeff = null|0|0.0 : the router z-loss
R model.moe_input_jitter_eps : router input jitter
R model.moe_token_dropping : token dropping
R model.moe_expert_capacity_factor : expert capacity
R model.moe_pad_expert_input_to_capacity : expert capacity padding
R model.moe_expert_rank_capacity_factor : expert capacity
I model.moe_token_drop_policy : token-drop policy (used only with capacity)
R model.moe_apply_probs_on_input : router probabilities applied before the experts
R model.moe_latent_size : latent MoE
R model.is_hybrid_model : Mamba hybrid layers
I model.mamba_* : Mamba settings (used only with Mamba layers)
I model.use_mamba_mem_eff_path : Mamba kernel choice
R model.mrope_section : multimodal RoPE
R model.heterogeneous_block_specs : heterogeneous layers
R model.fp16_lm_cross_entropy : fp16 cross-entropy
R model.rope_scaling : Llama-3.1 RoPE scaling
I model.rope_scaling_factor : RoPE scaling factor (used only with rope_scaling)
R model.rotary_scaling_factor : RoPE scaling
R model.seq_len_interpolation_factor : RoPE position interpolation
R model.yarn_* : YaRN RoPE scaling
R model.should_pad_vocab = false : vocabulary padding
R model.restore_modelopt_state : ModelOpt state
R model.use_arbitrary_attention_mask = null|false : arbitrary attention masks
I model.use_cpu_initialization : initialisation device
I model.make_vocab_size_divisible_by : vocabulary padding multiple (the vocabulary is not padded here)
I model.transformer_layer_spec : the layer structure follows experimental_attention_variant here
I model.transformer_impl : layers run on this program's kernels
H model.attention_backend -> model.attention_backend : fused (cuDNN), flash (own kernel) or auto; unfused and local are not built
I model.flash_attention_version : attention kernel choice
I model.perform_initialization : weights are initialised (or loaded) either way
I model.deterministic_mode : this program is deterministic
I model.cuda_graph* : CUDA graphs
I model.enable_cuda_graph : CUDA graphs
I model.external_cuda_graph : CUDA graphs
I model.inference_* : inference settings
I model.tp_comm_* : TP communication overlap
I model.tp_only_amax_red : FP8 amax reduction scope
I model.moe_token_dispatcher_type : token dispatcher (all-to-all over EP here)
I model.moe_flex_dispatcher_* : token dispatcher backend
I model.moe_enable_deepep : token dispatcher backend
I model.moe_deepep_num_sms : token dispatcher backend
I model.moe_hybridep_* : token dispatcher backend
H model.moe_permute_fusion -> model.moe_permute_fusion
I model.moe_permute_fusion* : fused permutation into the HybridEP dispatcher
I model.moe_ncclep_* : token dispatcher backend
I model.moe_router_fusion : fused router
I model.moe_router_padding_for_* : routing-map padding for quantized GEMMs
H model.moe_grouped_gemm -> model.moe_grouped_gemm
I model.moe_single_grouped_* : grouped-GEMM weight storage
I model.use_grouped_gemm_for_* : grouped GEMMs
I model.dense_grouped_gemm : grouped GEMMs
H model.moe_shared_expert_overlap -> model.moe_shared_expert_overlap
I model.moe_per_layer_logging : a logging switch
I model.moe_pad_experts_for_cuda_graph_inference : CUDA graphs
I model.moe_layer_recompute : MoE-layer recomputation (memory only)
I model.moe_paged_stash* : activation stashing (memory only)
I model.moe_grad_scale_func : runtime callback
I model.high_priority_a2a_comm_stream : stream priority
I model.*fusion* : kernel fusion
I model.fused_* : kernel fusion
I model.persist_layer_norm : kernel choice
I model.memory_efficient_layer_norm : kernel choice
I model.use_fused_weighted_squared_relu : kernel fusion
I model.use_te_activation_func : kernel choice
I model.use_te_rng_tracker : RNG tracker
I model.use_transformer_engine_* : Transformer Engine layer choice
I model.disable_bf16_reduced_precision_matmul : cuBLAS precision switch
I model.attention_softmax_in_fp32 : attention softmax precision (fp32 here)
I model.overlap_* : communication overlap
I model.delay_wgrad_compute : communication overlap
I model.ep_overlap_early_attn_memory_release : communication overlap
I model.batch_p2p_* : PP communication
I model.use_ring_exchange_p2p : PP communication
I model.pipeline_model_parallel_comm_backend : PP communication
I model.defer_embedding_wgrad_compute : PP scheduling
I model.wgrad_deferral_limit : PP scheduling
I model.microbatch_group_size_per_vp_stage : PP scheduling
I model.variable_seq_lengths : PP communication shapes
I model.deallocate_pipeline_outputs : PP memory
H model.account_for_embedding_in_pipeline_split -> model.account_for_embedding_in_pipeline_split
H model.account_for_loss_in_pipeline_split -> model.account_for_loss_in_pipeline_split
I model.cpu_offloading* : activation offloading (memory only)
I model.fine_grained_* : activation offloading (memory only)
I model.offload_modules : activation offloading (memory only)
I model.min_offloaded_tensor_size : activation offloading (memory only)
I model.delay_offload_until_cuda_graph : activation offloading (memory only)
I model.delta_offload_bytes_across_pp_ranks : activation offloading (memory only)
I model.activation_offload_fraction : activation offloading (memory only)
I model.num_microbatches_with_partial_activation_checkpoints : PP recomputation
I model.gtp_weight_remat_size : weight rematerialisation (memory only)
I model.expert_gtp_weight_remat_size : weight rematerialisation (memory only)
I model.timers : runtime object
I model.finalize_model_grads_func : runtime callback
I model.grad_scale_func : runtime callback
I model.no_sync_func : runtime callback
I model.grad_sync_func : runtime callback
I model.param_sync_func : runtime callback
I model.barrier_with_L1_time : timer barrier
I model.clone_scatter_output_in_embedding : embedding memory
I model.scatter_embedding_sequence_parallel : SP embedding scatter
I model.disable_parameter_transpose_cache : TE cache
I model.config_logger_dir : config logging
I model.flash_decode : inference
I model.batch_invariant_mode : inference
I model.symmetric_ar_type : all-reduce algorithm
I model.nccl_all_reduce_for_prefill : inference
I model.use_inference_optimized_layers : inference
I model.mlp_chunks_for_prefill : inference
I model.mlp_chunks_for_training : MLP chunking (memory only)
I model.hetereogenous_dist_checkpoint : checkpoint format
I model.parallel_output : TP output gather
I model.tp_comm_overlap_cfg : TP communication overlap
I model.init_model_with_meta_device : initialisation device
I model.masked_softmax_fusion : kernel fusion
H optimizer.lr -> optimizer.lr
H optimizer.min_lr -> optimizer.min_lr
H optimizer.weight_decay -> optimizer.weight_decay
H optimizer.adam_beta1 -> optimizer.adam_beta1
H optimizer.adam_beta2 -> optimizer.adam_beta2
H optimizer.adam_eps -> optimizer.adam_eps
H optimizer.clip_grad -> optimizer.clip_grad
H optimizer.optimizer -> optimizer.optimizer
H optimizer.use_precision_aware_optimizer -> optimizer.use_precision_aware_optimizer
H optimizer.exp_avg_dtype -> special : optimizer.exp_avg_dtype (torch.float32 / torch.bfloat16)
H optimizer.exp_avg_sq_dtype -> special : optimizer.exp_avg_sq_dtype (torch.float32 / torch.bfloat16)
R optimizer.decoupled_lr : a separate embedding/output learning rate
R optimizer.decoupled_min_lr : a separate embedding/output learning rate
R optimizer.apply_wd_to_qk_layernorm : weight decay on the QK norms
R optimizer.fp8_recipe : FP8 optimizer state
R optimizer.fp16 = false : fp16 training
I optimizer.bf16 : set from mixed_precision by Bridge
R optimizer.params_dtype = torch.float32|torch.bfloat16 : fp16 parameters
R optimizer.main_grads_dtype = torch.float32 : low-precision main gradients
R optimizer.main_params_dtype = torch.float32 : low-precision master weights
R optimizer.decoupled_weight_decay = true : L2-regularised (coupled) weight decay
R optimizer.grad_norm_skip_threshold = .inf|inf|null : skipping steps on large gradient norms
I optimizer.store_param_remainders : bf16 master-weight storage trick
I optimizer.reuse_grad_buf_for_mxfp8_param_ag : MXFP8 buffers
I optimizer.loss_scale : fp16 loss scaling (used only with fp16)
I optimizer.initial_loss_scale : fp16 loss scaling (used only with fp16)
I optimizer.min_loss_scale : fp16 loss scaling (used only with fp16)
I optimizer.loss_scale_window : fp16 loss scaling (used only with fp16)
I optimizer.hysteresis : fp16 loss scaling (used only with fp16)
I optimizer.sgd_momentum : SGD setting (used only with optimizer=sgd)
I optimizer.muon_* : Muon settings (used only with optimizer=muon, which is refused)
I optimizer.adaptive_muon_* : Muon settings (used only with Muon, which is refused)
I optimizer.lion_* : Lion settings (used only with optimizer=lion)
I optimizer.soap_* : SOAP settings (used only with optimizer=soap)
I optimizer.use_distributed_optimizer : mirrors ddp.use_distributed_optimizer
I optimizer.use_layer_wise_distributed_optimizer : optimizer sharding (same update)
I optimizer.overlap_* : communication overlap
I optimizer.optimizer_cpu_offload : optimizer offloading (memory only)
I optimizer.optimizer_offload_fraction : optimizer offloading (memory only)
I optimizer.use_torch_optimizer_for_cpu_offload : optimizer offloading (memory only)
I optimizer.overlap_cpu_optimizer_d2h_h2d : optimizer offloading (memory only)
I optimizer.pin_cpu_* : optimizer offloading (memory only)
I optimizer.log_num_zeros_in_grad : a logging switch
I optimizer.barrier_with_L1_time : timer barrier
I optimizer.timers : runtime object
I optimizer.config_logger_dir : config logging
I optimizer.optimizer_cuda_graph : CUDA graphs
H ddp.use_distributed_optimizer -> ddp.use_distributed_optimizer
H ddp.average_in_collective -> ddp.average_in_collective
I ddp.grad_reduce_in_fp32 : gradients are reduced in fp32 here
I ddp.check_for_nan_in_grad : non-finite gradients are always detected (train.stop_on_nan decides)
R ddp.use_megatron_fsdp = false : Megatron FSDP
R ddp.use_custom_fsdp = false : Megatron FSDP
R ddp.fp8_param_gather = false : FP8 parameter all-gather
R ddp.fp4_param_gather = false : FP4 parameter all-gather
H ddp.overlap_grad_reduce -> ddp.overlap_grad_reduce
H ddp.overlap_param_gather -> ddp.overlap_param_gather
I ddp.align_param_gather : bucketing, overlap, FSDP and NCCL settings
I ddp.num_distributed_optimizer_instances : bucketing, overlap, FSDP and NCCL settings
I ddp.check_for_large_grads : bucketing, overlap, FSDP and NCCL settings
H ddp.bucket_size -> ddp.bucket_size
I ddp.num_buckets : bucketing, overlap, FSDP and NCCL settings
I ddp.pad_buckets_for_high_nccl_busbw : bucketing, overlap, FSDP and NCCL settings
I ddp.reduce_scatter_with_fp32_accumulation : bucketing, overlap, FSDP and NCCL settings
I ddp.reuse_grad_buf_for_mxfp8_param_ag : bucketing, overlap, FSDP and NCCL settings
I ddp.data_parallel_sharding_strategy : bucketing, overlap, FSDP and NCCL settings
I ddp.gradient_reduce_div_fusion : bucketing, overlap, FSDP and NCCL settings
I ddp.suggested_communication_unit_size : bucketing, overlap, FSDP and NCCL settings
I ddp.keep_fp8_transpose_cache : bucketing, overlap, FSDP and NCCL settings
I ddp.nccl_ub : bucketing, overlap, FSDP and NCCL settings
I ddp.fsdp_double_buffer : bucketing, overlap, FSDP and NCCL settings
I ddp.fsdp_db_use_persist_buf_on_alloc_fail : bucketing, overlap, FSDP and NCCL settings
I ddp.fsdp_all_gather_in_start_param_sync : bucketing, overlap, FSDP and NCCL settings
I ddp.outer_dp_sharding_strategy : bucketing, overlap, FSDP and NCCL settings
I ddp.disable_symmetric_registration : bucketing, overlap, FSDP and NCCL settings
I ddp.fsdp_manual_registration : bucketing, overlap, FSDP and NCCL settings
I ddp.delay_wgrad_compute : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_main_params_dtype : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_main_grads_dtype : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_grad_comm_dtype : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_use_decoupled_grad : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_cuda_graph_mode : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_enable_fine_grained_param_gather : bucketing, overlap, FSDP and NCCL settings
I ddp.megatron_fsdp_max_pool_double_buffer : bucketing, overlap, FSDP and NCCL settings
I ddp.param_name_patterns_for_fp32_local_accumulation : bucketing, overlap, FSDP and NCCL settings
H validation.eval_iters -> validation.eval_iters
H validation.eval_interval -> validation.eval_interval
R validation.start_eval_at_iter : delayed evaluation
R validation.eval_global_batch_size : a separate evaluation batch size
R validation.skip_train = false : skipping training
R validation.full_validation = false : full-dataset validation
R validation.multiple_validation_sets = false : several validation sets
I validation.eval_micro_batch_size : evaluation microbatch size (bins are packed here)
I validation.test_mode : a Megatron test switch
I validation.validation_set_names : names of several validation sets
H scheduler.lr_decay_style -> scheduler.lr_decay_style
H scheduler.lr_decay_iters -> scheduler.lr_decay_iters
H scheduler.lr_warmup_iters -> scheduler.lr_warmup_iters
H scheduler.lr_warmup_init -> scheduler.lr_warmup_init
H scheduler.start_weight_decay -> scheduler.start_weight_decay
H scheduler.end_weight_decay -> scheduler.end_weight_decay
H scheduler.weight_decay_incr_style -> scheduler.weight_decay_incr_style
H scheduler.override_opt_param_scheduler -> scheduler.override_opt_param_scheduler
R scheduler.lr_decay_samples : sample-based schedules
R scheduler.lr_warmup_samples = 0 : sample-based schedules
R scheduler.lr_warmup_fraction : warm-up as a fraction (set lr_warmup_iters)
R scheduler.no_weight_decay_cond_type : a custom no-weight-decay rule
I scheduler.lr_wsd_* : WSD decay settings (used only with lr_decay_style=WSD)
I scheduler.use_checkpoint_opt_param_scheduler : resume behaviour (override_opt_param_scheduler decides)
I scheduler.lr_decay_steps : derived by Bridge from the iteration counts
I scheduler.lr_warmup_steps : derived by Bridge from the iteration counts
I scheduler.wd_incr_steps : derived by Bridge from the iteration counts
I scheduler.wsd_decay_steps : derived by Bridge from the iteration counts
I scheduler.max_steps : derived by Bridge from the iteration counts
H dataset.seq_length -> dataset.seq_length
H dataset.num_workers -> dataset.num_workers
H dataset.enable_global_batch_packing -> dataset.enable_global_batch_packing
H dataset.dataloader_type -> special : dataset.dataloader_type (null: single)
H dataset.path_to_cache -> special : dataset.cache_dir (null: the default)
H dataset.blend -> special : one prefix: megatron_indexed data; null with no data_path: mock data
H dataset.data_path -> special : dataset.data_path, megatron_indexed
H dataset.mock -> special : true: mock_varlen data of seq_length samples
H dataset.split -> special : real data: 100,0,0 only (held-out data is dataset_root's validation.jsonl)
H dataset.dataset_root -> special : dataset.data_path = <root>/training.jsonl (chat_jsonl)
H dataset.preprocessing -> special : null or ChatSFTPreprocessingConfig (chat messages); prompt/completion refused
R dataset.preprocessing.loss_mode = assistant : loss on other than assistant tokens
R dataset.blend_per_split : per-split blends
R dataset.multiple_validation_sets = null|false : several validation sets
R dataset.full_validation = null|false : full-dataset validation
R dataset.hf_dataset : Hugging Face Hub datasets (nothing is downloaded: write JSONL and set dataset_root)
R dataset.hf_validation_dataset : Hugging Face Hub datasets
R dataset.hf_test_dataset : Hugging Face Hub datasets
R dataset.max_train_samples : a capped training set
R dataset.enable_offline_packing = false : offline packing (global-batch packing is the only data path)
R dataset.packed_sequence_specs = null : offline packing (Bridge before 0.6; global-batch packing is the only data path)
R dataset.trust_remote_code = null|false : remote dataset code
I dataset.offline_packing_specs* : offline packing settings (used only with enable_offline_packing)
I dataset.random_seed : shuffling uses rng.seed here
I dataset.seed : shuffling uses rng.seed here
H dataset.sequence_length -> special : dataset.seq_length (how Bridge before 0.6 dumps it)
I dataset.split_matrix : derived by Bridge from split
I dataset.reset_position_ids : samples are whole documents with their own positions here
I dataset.reset_attention_mask : samples are whole documents with their own attention here
R dataset.eod_mask_loss = null|false : masking the loss on end-of-document tokens (the loss counts every token of a document here)
I dataset.create_attention_mask : masks come from cu_seqlens here
I dataset.add_extra_token_to_sequence : samples are whole documents here
I dataset.drop_last_partial_validation_sequence : samples are whole documents here
I dataset.inter_document_masking : samples are whole documents here
I dataset.data_parallel_size : derived by Bridge from the model
I dataset.sequence_parallel_size : derived by Bridge from the model
I dataset.context_parallel_size : derived by Bridge from the model
I dataset.hybrid_context_parallel : derived by Bridge from the model
I dataset.dynamic_context_parallel : derived by Bridge from the model
I dataset.tokenizer : runtime object
H dataset.do_validation -> special : true: dataset.validation_data_path = <root>/validation.jsonl
I dataset.do_test : no test split is run
H dataset.dataset_kwargs -> special : padding, cache and kernel arguments have no effect here; any other argument (sample filters, seeds, special tokens, loss options) is refused
I dataset.data_sharding : loader workers, memory maps, caches and index options
I dataset.pin_memory : loader workers, memory maps, caches and index options
I dataset.drop_last : loader workers, memory maps, caches and index options
I dataset.persistent_workers : loader workers, memory maps, caches and index options
I dataset.dataloader_save : loader workers, memory maps, caches and index options
I dataset.dataloader_load : loader workers, memory maps, caches and index options
I dataset.num_dataset_builder_threads : loader workers, memory maps, caches and index options
I dataset.mmap_bin_files : loader workers, memory maps, caches and index options
I dataset.mid_level_dataset_surplus : loader workers, memory maps, caches and index options
I dataset.allow_ambiguous_pad_tokens : loader workers, memory maps, caches and index options
I dataset.fast_cache_load : loader workers, memory maps, caches and index options
I dataset.defer_npy_index_mmap : loader workers, memory maps, caches and index options
I dataset.object_storage_cache_path : loader workers, memory maps, caches and index options
I dataset.sequences_per_dataset : loader workers, memory maps, caches and index options
I dataset.token_dtype_code : loader workers, memory maps, caches and index options
I dataset.per_dataset_sequences_path : loader workers, memory maps, caches and index options
I dataset.hf_output_root : loader workers, memory maps, caches and index options
I dataset.hf_validation_proportion : loader workers, memory maps, caches and index options
I dataset.hf_rewrite : loader workers, memory maps, caches and index options
I dataset.memmap_workers : loader workers, memory maps, caches and index options
H logger.log_interval -> logger.log_interval
H logger.tensorboard_dir -> logger.tensorboard_dir
H logger.wandb_project -> logger.wandb_project
H logger.wandb_entity -> logger.wandb_entity
H logger.wandb_exp_name -> logger.wandb_exp_name
H logger.wandb_save_dir -> logger.wandb_save_dir
I logger.* : TensorBoard and W&B options, MLflow, Comet, timers and log-level settings
H tokenizer.tokenizer_type -> special : tokenizer.tokenizer_type
H tokenizer.tokenizer_model -> special : tokenizer.tokenizer_model, an Org/Name found in the local HF cache
R tokenizer.vocab_file : vocabulary files (a tokenizer.json is read)
R tokenizer.merge_file : vocabulary files (a tokenizer.json is read)
R tokenizer.vocab_extra_ids = 0 : extra vocabulary ids
R tokenizer.special_tokens : extra special tokens
R tokenizer.chat_template : a custom chat template (the built-in Qwen template is used)
R tokenizer.chat_template_path : a custom chat template
R tokenizer.tokenizer_prompt_format : a prompt format
R tokenizer.force_system_message = false : a forced system message
I tokenizer.vocab_size : vocabulary padding and tokenizer-backend options
I tokenizer.padded_vocab_size : vocabulary padding and tokenizer-backend options
I tokenizer.pad_vocab_size : vocabulary padding and tokenizer-backend options
I tokenizer.metadata_path : vocabulary padding and tokenizer-backend options
I tokenizer.tiktoken_pattern : vocabulary padding and tokenizer-backend options
I tokenizer.tiktoken_num_special_tokens : vocabulary padding and tokenizer-backend options
I tokenizer.tiktoken_special_tokens : vocabulary padding and tokenizer-backend options
I tokenizer.tokenizer_sentencepiece_legacy : vocabulary padding and tokenizer-backend options
I tokenizer.tokenizer_sentencepiece_ignore_extra_whitespaces : vocabulary padding and tokenizer-backend options
I tokenizer.tokenizer_hf_no_use_fast : vocabulary padding and tokenizer-backend options
I tokenizer.tokenizer_hf_no_include_special_tokens : vocabulary padding and tokenizer-backend options
I tokenizer.trust_remote_code : vocabulary padding and tokenizer-backend options
I tokenizer.null_tokenizer_eod_id : vocabulary padding and tokenizer-backend options
I tokenizer.null_tokenizer_pad_id : vocabulary padding and tokenizer-backend options
I tokenizer.make_vocab_size_divisible_by : vocabulary padding and tokenizer-backend options
I tokenizer.tensor_model_parallel_size : vocabulary padding and tokenizer-backend options
I tokenizer.rank : vocabulary padding and tokenizer-backend options
R tokenizer.use_tokenizer_vocab_size = false : a model vocabulary sized from the tokenizer (Bridge then ignores model.vocab_size; the vocabulary here is model.vocab_size)
H tokenizer.hf_tokenizer_kwargs -> special : revision: the cache snapshot of tokenizer_model (other arguments have no effect)
I tokenizer.sp_tokenizer_kwargs : vocabulary padding and tokenizer-backend options
I tokenizer.image_tag_type : vocabulary padding and tokenizer-backend options
H checkpoint.save -> checkpoint.save : this program's checkpoint format
H checkpoint.save_interval -> checkpoint.save_interval
H checkpoint.load -> checkpoint.load : this program's checkpoints (Bridge's torch_dist ones are refused when read)
H checkpoint.most_recent_k -> checkpoint.most_recent_k
H checkpoint.pretrained_checkpoint -> checkpoint.pretrained_checkpoint : an HF safetensors folder here (a Megatron torch_dist checkpoint is refused when the weights are read)
R checkpoint.ckpt_step : loading a chosen step
I checkpoint.save_params_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_activations_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_tokens_per_expert_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_wgrads_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_dgrads_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_retain_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_optim : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_rng : checkpoint format, async saving, parallel I/O and replication settings
R checkpoint.load_optim = true : resuming without the optimizer state
I checkpoint.load_main_params_from_ckpt : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.load_rng : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.non_persistent_save_interval : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.non_persistent_ckpt_type : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.non_persistent_global_ckpt_dir : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.non_persistent_local_ckpt_dir : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.non_persistent_local_ckpt_algo : checkpoint format, async saving, parallel I/O and replication settings
R checkpoint.finetune = false : resuming weights only (set checkpoint.pretrained_checkpoint instead)
I checkpoint.use_checkpoint_args : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.use_mp_args_from_checkpoint_args : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.use_tokenizer_model_from_checkpoint_args : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.exit_on_missing_checkpoint : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_format : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.auto_detect_ckpt_format : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_convert_format : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_convert_save : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_convert_update_legacy_dist_opt_format : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.fully_parallel_save : checkpoint format, async saving, parallel I/O and replication settings
H checkpoint.async_save -> checkpoint.async_save : sharded checkpoints written in the background
I checkpoint.async_ckpt_cpu_priority : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.async_ckpt_io_priority : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.async_ckpt_use_cpu_shm : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.fully_parallel_load : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_fully_parallel_load_exchange_algo : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_fully_parallel_save_process_group : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_fully_parallel_load_process_group : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_assume_constant_structure : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.ckpt_load_validate_sharding_integrity : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.dist_ckpt_strictness : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.dist_ckpt_save_pre_mcore_014 : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.dist_ckpt_optim_fully_reshardable : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.distrib_optim_fully_reshardable_mem_efficient : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.save_tokenizer_assets : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.replication : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.replication_jump : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.replication_factor : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.verify_integrity : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.stream_ckpt_dequant : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.storage_writers_per_rank : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.use_persistent_ckpt_worker : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.async_strategy : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.async_write_results_mp_mode : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.strict_fsdp_dtensor_load : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.custom_manager_class : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.dist_ckpt_workers : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.also_save_hf_checkpoint : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.hf_source_path : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.hf_trust_remote_code : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.hf_distributed_save : checkpoint format, async saving, parallel I/O and replication settings
I checkpoint.hf_save_every_n_ranks : checkpoint format, async saving, parallel I/O and replication settings
H dist.distributed_timeout_minutes -> dist.distributed_timeout_minutes
H dist.use_decentralized_pg -> dist.use_decentralized_pg
R dist.eval_context_parallel_size : a separate evaluation CP size
I dist.distributed_backend : backend, process-group and flight-recorder settings
I dist.align_grad_reduce : backend, process-group and flight-recorder settings
I dist.local_rank : backend, process-group and flight-recorder settings
I dist.lazy_mpu_init : backend, process-group and flight-recorder settings
R dist.use_megatron_fsdp = false : Megatron FSDP
R dist.use_torch_fsdp2 = false : PyTorch FSDP2
I dist.nccl_communicator_config_path : backend, process-group and flight-recorder settings
I dist.use_tp_pp_dp_mapping : backend, process-group and flight-recorder settings
I dist.use_gloo_process_groups : backend, process-group and flight-recorder settings
I dist.use_sharp : backend, process-group and flight-recorder settings
I dist.sharp_enabled_group : backend, process-group and flight-recorder settings
I dist.high_priority_stream_groups : backend, process-group and flight-recorder settings
I dist.distributed_timeout_seconds_after_init : backend, process-group and flight-recorder settings
I dist.flight_recorder_dump_path : backend, process-group and flight-recorder settings
I dist.flight_recorder_trace_buffer_size : backend, process-group and flight-recorder settings
I dist.flight_recorder_dump_on_timeout : backend, process-group and flight-recorder settings
I dist.flight_recorder_include_stack_trace : backend, process-group and flight-recorder settings
I dist.flight_recorder_include_only_active : backend, process-group and flight-recorder settings
I dist.flight_recorder_extra_dump_on_exec : backend, process-group and flight-recorder settings
I dist.disable_jit_fuser : backend, process-group and flight-recorder settings
I dist.external_gpu_device_mapping : backend, process-group and flight-recorder settings
I dist.enable_megatron_core_experimental : backend, process-group and flight-recorder settings
I ft.* : fault tolerance
I straggler.* : straggler detection
I nvrx_straggler.* : straggler detection
I profiling.* : profilers
R peft.* : PEFT (LoRA / DoRA adapters)
I comm_overlap.* : communication overlap
H mixed_precision.bf16 -> special : mixed_precision bf16_mixed
H mixed_precision.fp32 -> special : mixed_precision fp32
R mixed_precision.fp16 = false : fp16 training
R mixed_precision.fp8 : FP8 training
R mixed_precision.fp8_param = null|false : FP8 parameters
R mixed_precision.fp8_param_gather = false : FP8 parameter all-gather
R mixed_precision.fp4 : FP4 training
R mixed_precision.fp4_param = null|false : FP4 parameters
R mixed_precision.fp4_param_gather = false : FP4 parameter all-gather
I mixed_precision.* : dtypes Bridge copies into model/optimizer, loss scaling and FP8/FP4 details
I tensor_inspect.* : tensor inspection
I inprocess_restart.* : in-process restart
)";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, separator)) out.push_back(item);
  return out;
}

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(' ') - begin + 1);
}

BridgeRule parse_rule(const std::string& line) {
  BridgeRule rule;
  std::string rest = line;
  const auto colon = rest.find(" : ");
  if (colon != std::string::npos) {
    rule.note = trim(rest.substr(colon + 3));
    rest = rest.substr(0, colon);
  }
  const auto equals = rest.find(" = ");
  if (equals != std::string::npos) {
    rule.accepted = split(trim(rest.substr(equals + 3)), '|');
    rest = rest.substr(0, equals);
  }
  const auto arrow = rest.find(" -> ");
  if (arrow != std::string::npos) {
    rule.target = trim(rest.substr(arrow + 4));
    rest = rest.substr(0, arrow);
  }
  rest = trim(rest);
  const auto space = rest.find(' ');
  const std::string kind = rest.substr(0, space);
  rule.pattern = trim(rest.substr(space + 1));
  if (kind == "H") {
    rule.kind = BridgeFieldClass::honoured;
  } else if (kind == "I") {
    rule.kind = BridgeFieldClass::inert;
  } else if (kind == "R") {
    rule.kind = BridgeFieldClass::refused;
  } else {
    throw core::Error(core::ErrorKind::runtime, "", "bridge_rules.cpp: bad rule line: " + line);
  }
  return rule;
}

}  // namespace

const std::vector<BridgeRule>& bridge_rules() {
  static const std::vector<BridgeRule> rules = [] {
    std::vector<BridgeRule> out;
    for (const auto& line : split(rule_text, '\n')) {
      if (!trim(line).empty()) out.push_back(parse_rule(line));
    }
    return out;
  }();
  return rules;
}

}  // namespace dyncp::config
