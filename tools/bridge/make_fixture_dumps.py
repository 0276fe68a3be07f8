#!/usr/bin/env python3
"""Write the Megatron-Bridge ConfigContainer dumps under tests/fixtures/bridge/.

Each dump is what `ConfigContainer.to_yaml()` writes for one of Bridge's published Qwen recipes
(megatron-bridge 0.6.2, megatron/bridge/recipes/qwen/): every field of every section, sorted as
yaml.safe_dump sorts them, with `_target_` naming each class and `{_target_, _call_}` objects for
dtypes, enums and functions. Field lists and defaults come from lib/config/bridge_fields.inc;
the values below are the recipe's assignments and what AutoBridge's provider_bridge sets from
the checkpoint's config.json. `*_dynamic_cp.yaml` are the same dumps edited (Bridge key names
only) to turn on dynamic context parallelism.

    python3 tools/bridge/make_fixture_dumps.py   # rewrites tests/fixtures/bridge/*.yaml

The main dumps use the fields of the newest release in bridge_fields.inc; releases/ holds the
pretraining recipe (edited for dynamic CP) as each older release of the table would dump it, its
fields and defaults, with the recipe's settings where that release has the field.
"""

import ast
import copy
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "bridge")
INC = os.path.join(ROOT, "lib", "config", "bridge_fields.inc")
DYNAMIC_CP_LABEL = "pr6127"
# The recipe written for each older release (tests/fixtures/bridge/releases/).
RELEASE_RECIPE = "qwen3_30b_a3b_pretrain"
# ConfigContainer fields newer than the oldest release read -> the first release with them.
TOP_LEVEL_SINCE = {"env_vars": "0.6.0"}
# Renamed fields: newest name -> the name of releases that lack it.
RENAMED = {"seq_length": "sequence_length"}

CLASS_PATHS = {
    "RNGConfig": "megatron.training.config.common_config.RNGConfig",
    "RerunStateMachineConfig": "megatron.bridge.training.config.RerunStateMachineConfig",
    "TrainingConfig": "megatron.bridge.training.config.TrainingConfig",
    "GPTModelProvider": "megatron.bridge.models.gpt_provider.GPTModelProvider",
    "OptimizerConfig": "megatron.bridge.training.config.OptimizerConfig",
    "DistributedDataParallelConfig": "megatron.bridge.training.config.DistributedDataParallelConfig",
    "ValidationConfig": "megatron.training.config.training_config.ValidationConfig",
    "SchedulerConfig": "megatron.bridge.training.config.SchedulerConfig",
    "GPTDatasetConfig": "megatron.bridge.training.config.GPTDatasetConfig",
    "GPTSFTDatasetConfig": "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig",
    "ChatSFTPreprocessingConfig": "megatron.bridge.data.sft_processing.ChatSFTPreprocessingConfig",
    "LoggerConfig": "megatron.bridge.training.config.LoggerConfig",
    "TokenizerConfig": "megatron.bridge.training.tokenizers.config.TokenizerConfig",
    "CheckpointConfig": "megatron.bridge.training.config.CheckpointConfig",
    "DistributedInitConfig": "megatron.bridge.training.config.DistributedInitConfig",
    "ProfilingConfig": "megatron.bridge.training.config.ProfilingConfig",
    "MixedPrecisionConfig": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig",
}

ENUM_DEFAULTS = {
    # field -> (enum class, value) for defaults a dump writes as enum objects
    "attention_backend": ("megatron.core.transformer.enums.AttnBackend", 5),
    "exit_signal": ("signal.Signals", 15),
}


def dtype(name):
    return {"_target_": name, "_call_": False}


def function(path):
    return {"_target_": path, "_call_": False}


def version(label):
    return [int(part) for part in label.split(".")]


def releases():
    """Release labels of lib/config/bridge_fields.inc, oldest first, without the PR label."""
    out = []
    with open(INC) as inc:
        for line in inc:
            if line.startswith("DYNCP_BRIDGE_RELEASE"):
                label, _sources = ast.literal_eval(line[len("DYNCP_BRIDGE_RELEASE"):])
                if label[0].isdigit() or label == "main":
                    out.append(label)
    return out


def read_fields(release):
    """(section, class) -> [(field, default)] of one release, plus the dynamic-CP fields."""
    fields = {}
    added = []
    with open(INC) as inc:
        for line in inc:
            if line.startswith("DYNCP_BRIDGE_FIELD"):
                section, cls, name, _type, default, labels = ast.literal_eval(
                    line[len("DYNCP_BRIDGE_FIELD"):])
                if release in labels.split():
                    fields.setdefault((section, cls), []).append((name, default))
                elif DYNAMIC_CP_LABEL in labels.split():
                    added.append(((section, cls), (name, default)))
    for key, field in added:  # to the classes this release has
        if key in fields:
            fields[key].append(field)
    return fields


def value_of(name, default):
    if default.startswith("<"):
        return None
    if default == "":
        return ""
    if name in ENUM_DEFAULTS:
        target, number = ENUM_DEFAULTS[name]
        return {"_target_": target, "_call_": True, "_args_": [number], "_name_": default}
    if default.startswith("torch."):
        return dtype(default)
    try:
        return yaml.safe_load(default)
    except yaml.YAMLError:
        return default


def section(fields, section_name, cls, overrides):
    if (section_name, cls) not in fields and fields.get("_older"):
        return None  # a class that release does not have (its recipes are not written)
    out = {"_target_": CLASS_PATHS[cls]}
    names = [name for name, _default in fields[(section_name, cls)]]
    for name, default in fields[(section_name, cls)]:
        if section_name == "dataset" and name == "sequence_length" and "seq_length" in names:
            continue  # GPTDatasetConfig.to_cfg_dict (Bridge 0.6+) leaves MCore's copy out
        out[name] = value_of(name, default)
    for name, value in overrides.items():
        if name not in out and RENAMED.get(name) in out:
            name = RENAMED[name]
        if name not in out:
            if not fields.get("_older"):
                raise KeyError(f"{section_name}.{name} is not a field of {cls}")
            print(f"{fields['_older']}: {section_name}.{name} is not a field of {cls} there; "
                  "left out", file=sys.stderr)
            continue
        out[name] = value
    return out


# What AutoBridge.to_megatron_provider sets for each checkpoint (its provider_bridge and the
# checkpoint's config.json), then the recipe's own model settings.
QWEN3_30B_A3B = dict(
    hf_model_id="Qwen/Qwen3-30B-A3B", num_layers=48, hidden_size=2048, ffn_hidden_size=6144,
    num_attention_heads=32, num_query_groups=4, kv_channels=128, vocab_size=151936,
    layernorm_epsilon=1e-6, rotary_base=1000000, rotary_percent=1.0,
    position_embedding_type="rope", normalization="RMSNorm", gated_linear_unit=True,
    activation_func=function("torch.nn.functional.silu"), add_bias_linear=False,
    add_qkv_bias=False, hidden_dropout=0.0, attention_dropout=0.0, qk_layernorm=True,
    share_embeddings_and_output_weights=False, num_moe_experts=128, moe_router_topk=8,
    moe_ffn_hidden_size=768, moe_grouped_gemm=True, moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=0.001, moe_router_pre_softmax=False, moe_token_dispatcher_type="alltoall",
    moe_permute_fusion=True, autocast_dtype=dtype("torch.bfloat16"),
    params_dtype=dtype("torch.bfloat16"), bf16=True, seq_length=4096,
    make_vocab_size_divisible_by=128,
)

HYBRID_COMMON = dict(
    position_embedding_type="rope", normalization="RMSNorm", gated_linear_unit=True,
    activation_func=function("torch.nn.functional.silu"), add_bias_linear=False,
    add_qkv_bias=False, hidden_dropout=0.0, attention_dropout=0.0, qk_layernorm=True,
    share_embeddings_and_output_weights=False, moe_grouped_gemm=True,
    moe_router_load_balancing_type="global_aux_loss", moe_aux_loss_coeff=0.001,
    moe_router_pre_softmax=False, moe_token_dispatcher_type="alltoall", moe_permute_fusion=True,
    moe_shared_expert_gate=True, moe_router_dtype="fp32", layernorm_zero_centered_gamma=True,
    attention_output_gate=True, experimental_attention_variant="gated_delta_net",
    linear_attention_freq=4, linear_conv_kernel_dim=4, linear_key_head_dim=128,
    linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
    hetereogenous_dist_checkpoint=True, autocast_dtype=dtype("torch.bfloat16"),
    params_dtype=dtype("torch.bfloat16"), bf16=True,
    transformer_layer_spec=function(
        "megatron.core.models.gpt.experimental_attention_variant_module_specs."
        "get_transformer_block_with_experimental_attention_variant_spec"),
)

QWEN3_NEXT_80B_A3B = dict(
    HYBRID_COMMON, hf_model_id="Qwen/Qwen3-Next-80B-A3B-Instruct", num_layers=48,
    hidden_size=2048, ffn_hidden_size=5120, num_attention_heads=16, num_query_groups=2,
    kv_channels=256, vocab_size=151936, layernorm_epsilon=1e-6, rotary_base=10000000,
    rotary_percent=0.25, num_moe_experts=512, moe_router_topk=10, moe_ffn_hidden_size=512,
    moe_shared_expert_intermediate_size=512, seq_length=4096,
)

QWEN35_35B_A3B = dict(
    HYBRID_COMMON, hf_model_id="Qwen/Qwen3.5-35B-A3B", num_layers=40, hidden_size=2048,
    ffn_hidden_size=512, num_attention_heads=16, num_query_groups=2, kv_channels=256,
    vocab_size=248320, layernorm_epsilon=1e-6, rotary_base=10000000, rotary_percent=0.25,
    num_moe_experts=256, moe_router_topk=8, moe_ffn_hidden_size=512,
    moe_shared_expert_intermediate_size=512, seq_length=4096,
)


def container(fields, model, dataset, train, optimizer, scheduler, ddp, validation, tokenizer,
              checkpoint, logger, rng_seed, mixed_precision):
    dataset_cls = dataset.pop("_class")
    return {
        "_target_": "megatron.bridge.training.config.ConfigContainer",
        "checkpoint": section(fields, "checkpoint", "CheckpointConfig", checkpoint),
        "comm_overlap": None,
        "dataset": section(fields, "dataset", dataset_cls, dataset),
        "ddp": section(fields, "ddp", "DistributedDataParallelConfig", ddp),
        "dist": section(fields, "dist", "DistributedInitConfig", {}),
        "env_vars": {},
        "ft": None,
        "inprocess_restart": None,
        "logger": section(fields, "logger", "LoggerConfig", logger),
        "mixed_precision": mixed_precision,
        "model": section(fields, "model", "GPTModelProvider", model),
        "nvrx_straggler": None,
        "optimizer": section(fields, "optimizer", "OptimizerConfig", optimizer),
        "optimizer_config_override_provider": {
            "_target_": "megatron.bridge.training.config.OptimizerConfigOverrideProvider"},
        "peft": None,
        "profiling": section(fields, "profiling", "ProfilingConfig", {}),
        "rerun_state_machine": section(fields, "rerun_state_machine", "RerunStateMachineConfig",
                                       {}),
        "rng": section(fields, "rng", "RNGConfig", {"seed": rng_seed}),
        "scheduler": section(fields, "scheduler", "SchedulerConfig", scheduler),
        "straggler": None,
        "tensor_inspect": None,
        "tokenizer": section(fields, "tokenizer", "TokenizerConfig", tokenizer),
        "train": section(fields, "train", "TrainingConfig", train),
        "validation": section(fields, "validation", "ValidationConfig", validation),
    }


def adam(lr, min_lr, beta2):
    return dict(optimizer="adam", lr=lr, min_lr=min_lr, weight_decay=0.1, bf16=True,
                adam_beta1=0.9, adam_beta2=beta2, adam_eps=1e-8, use_distributed_optimizer=True,
                clip_grad=1.0, params_dtype=dtype("torch.bfloat16"))


def cosine(warmup, decay):
    return dict(start_weight_decay=0.033, end_weight_decay=0.033,
                weight_decay_incr_style="constant", lr_decay_style="cosine",
                lr_wsd_decay_style="minus_sqrt", lr_wsd_decay_iters=decay, lr_warmup_iters=warmup,
                lr_warmup_init=0.0, lr_decay_iters=decay)


def bf16_mixed(fields, grad_reduce_in_fp32=True):
    return section(fields, "mixed_precision", "MixedPrecisionConfig", dict(
        bf16=True, params_dtype=dtype("torch.bfloat16"), pipeline_dtype=dtype("torch.bfloat16"),
        autocast_enabled=False, grad_reduce_in_fp32=grad_reduce_in_fp32))


def pretrain_dataset(seq_length):
    return dict(_class="GPTDatasetConfig", random_seed=1234, reset_attention_mask=False,
                reset_position_ids=False, eod_mask_loss=False, seq_length=seq_length,
                num_dataset_builder_threads=1, blend=None, blend_per_split=None,
                split="9999,8,2", data_sharding=True, dataloader_type="single",
                num_workers=8)


def sft_dataset(seq_length):
    return dict(_class="GPTSFTDatasetConfig", seq_length=seq_length, dataset_root="data/sft",
                preprocessing={"_target_": CLASS_PATHS["ChatSFTPreprocessingConfig"],
                               "loss_mode": "assistant"},
                enable_offline_packing=True,
                offline_packing_specs={
                    "_target_": "megatron.bridge.data.packing.config.PackedSequenceSpecs",
                    "packed_sequence_size": seq_length, "max_single_sequence_length": None,
                    "tokenizer_model_name": None, "num_tokenizer_workers": -1,
                    "packed_train_data_path": None, "packed_val_data_path": None,
                    "packed_metadata_path": None, "pad_cu_seqlens": False,
                    "pad_seq_to_mult": 1},
                dataset_kwargs={"pad_to_max_length": True}, num_workers=1,
                dataloader_type="batch")


def dumps(fields):
    """name -> (dump, edits that turn on dynamic CP)."""
    out = {}

    # qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config: TP1 PP1 EP16, seq 4096, mock data.
    model = dict(QWEN3_30B_A3B, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                 context_parallel_size=1, expert_model_parallel_size=16,
                 expert_tensor_parallel_size=1, sequence_parallel=False,
                 transformer_impl="transformer_engine", cuda_graph_impl="transformer_engine",
                 cuda_graph_scope=["moe_router", "moe_preprocess"], cuda_graph_warmup_steps=3,
                 moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
                 moe_hybridep_num_sms=32, bias_activation_fusion=True, apply_rope_fusion=True,
                 moe_router_fusion=True, cross_entropy_fusion_impl="te", use_te_rng_tracker=True,
                 init_method_std=0.02)
    out["qwen3_30b_a3b_pretrain"] = (container(
        fields, model, pretrain_dataset(4096),
        dict(train_iters=100, global_batch_size=1024, micro_batch_size=1, manual_gc=True,
             manual_gc_interval=100, manual_gc_eval=100),
        dict(adam(3e-4, 3e-5, 0.95), use_precision_aware_optimizer=True),
        cosine(40, 100),
        dict(check_for_nan_in_grad=True, grad_reduce_in_fp32=False, overlap_grad_reduce=True,
             overlap_param_gather=True, average_in_collective=True,
             data_parallel_sharding_strategy="optim_grads_params", use_distributed_optimizer=True),
        dict(eval_interval=500, eval_iters=32),
        dict(tokenizer_type="HuggingFaceTokenizer", tokenizer_model="Qwen/Qwen3-30B-A3B",
             use_tokenizer_vocab_size=True),
        dict(save_interval=50, save="nemo_experiments/default/checkpoints", load=None,
             ckpt_format="torch_dist", fully_parallel_save=True),
        dict(log_interval=10, tensorboard_dir="nemo_experiments/default/tb_logs",
             log_timers_to_tensorboard=True),
        1234, bf16_mixed(fields, grad_reduce_in_fp32=False)),
        {"model": dict(context_parallel_size=2, dynamic_context_parallel=True,
                       max_seqlen_per_dp_cp_rank=1024, calculate_per_token_loss=True),
         "dataset": dict(enable_global_batch_packing=True),
         "ddp": dict(average_in_collective=False),
         "tokenizer": dict(use_tokenizer_vocab_size=False)}, 16)

    # qwen3_30b_a3b_sft_16gpu_h100_bf16_config: TP1 PP1 EP16, seq 2048, packed SFT data.
    model = dict(QWEN3_30B_A3B, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                 context_parallel_size=1, expert_model_parallel_size=16,
                 expert_tensor_parallel_size=1, sequence_parallel=False, seq_length=2048,
                 transformer_impl="transformer_engine", cuda_graph_impl="none",
                 cuda_graph_scope="full", bias_activation_fusion=True, apply_rope_fusion=True,
                 moe_router_fusion=True, moe_flex_dispatcher_backend=None,
                 cross_entropy_fusion_impl="te")
    out["qwen3_30b_a3b_sft"] = (container(
        fields, model, sft_dataset(2048),
        dict(train_iters=100, global_batch_size=32, micro_batch_size=1, manual_gc=True,
             manual_gc_interval=100, manual_gc_eval=100),
        adam(5e-6, 0.0, 0.95), cosine(10, 100),
        dict(check_for_nan_in_grad=True, grad_reduce_in_fp32=True, overlap_grad_reduce=True,
             overlap_param_gather=True, average_in_collective=True, use_distributed_optimizer=True),
        dict(eval_interval=50, eval_iters=10),
        dict(tokenizer_type="HuggingFaceTokenizer", tokenizer_model="Qwen/Qwen3-30B-A3B",
             hf_tokenizer_kwargs={"revision": "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"}),
        dict(save_interval=100, save="nemo_experiments/default/checkpoints", load=None,
             pretrained_checkpoint=None, ckpt_format="torch_dist", fully_parallel_save=True),
        dict(log_interval=10, tensorboard_dir="nemo_experiments/default/tb_logs",
             log_timers_to_tensorboard=True),
        5678, bf16_mixed(fields)),
        {"model": dict(context_parallel_size=2, dynamic_context_parallel=True,
                       max_seqlen_per_dp_cp_rank=1024, calculate_per_token_loss=True),
         "dataset": dict(enable_global_batch_packing=True, enable_offline_packing=False,
                         dataloader_type="single"),
         "ddp": dict(average_in_collective=False)}, 16)

    # qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config: TP1 PP1 EP16 (recipe: TP2 EP8 variants
    # exist), seq 2048 SFT.
    model = dict(QWEN3_NEXT_80B_A3B, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                 context_parallel_size=1, expert_model_parallel_size=16,
                 expert_tensor_parallel_size=1, sequence_parallel=False, seq_length=2048,
                 transformer_impl="transformer_engine", cuda_graph_impl="none",
                 recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    out["qwen3_next_80b_a3b_sft"] = (container(
        fields, model, sft_dataset(2048),
        dict(train_iters=1000, global_batch_size=128, micro_batch_size=1),
        adam(5e-6, 0.0, 0.98), cosine(50, None),
        dict(check_for_nan_in_grad=True, grad_reduce_in_fp32=True, use_distributed_optimizer=True),
        dict(eval_interval=100, eval_iters=32),
        dict(tokenizer_type="HuggingFaceTokenizer",
             tokenizer_model="Qwen/Qwen3-Next-80B-A3B-Instruct"),
        dict(save_interval=100, save="nemo_experiments/default/checkpoints", load=None,
             ckpt_format="torch_dist", fully_parallel_save=True),
        dict(log_interval=1, tensorboard_dir="nemo_experiments/default/tb_logs",
             log_timers_to_tensorboard=True),
        5678, "bf16_mixed"),
        {"model": dict(context_parallel_size=2, dynamic_context_parallel=True,
                       max_seqlen_per_dp_cp_rank=1024, calculate_per_token_loss=True,
                       moe_router_load_balancing_type="aux_loss"),
         "dataset": dict(enable_global_batch_packing=True, enable_offline_packing=False,
                         dataloader_type="single")}, 16)

    # qwen35_text_35b_a3b_pretrain_8gpu_gb200_bf16_config: TP1 PP1 EP8, seq 4096, mock data.
    model = dict(QWEN35_35B_A3B, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                 context_parallel_size=1, expert_model_parallel_size=8,
                 expert_tensor_parallel_size=1, sequence_parallel=False,
                 transformer_impl="transformer_engine", cuda_graph_impl="none",
                 recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                 mtp_num_layers=None)
    out["qwen35_35b_a3b_pretrain"] = (container(
        fields, model, pretrain_dataset(4096),
        dict(train_iters=300000, global_batch_size=32, micro_batch_size=1, manual_gc=True,
             manual_gc_interval=100, manual_gc_eval=100),
        adam(3e-4, 3e-5, 0.95), cosine(500, None),
        dict(check_for_nan_in_grad=True, grad_reduce_in_fp32=True, overlap_grad_reduce=True,
             overlap_param_gather=True, average_in_collective=True,
             data_parallel_sharding_strategy="optim_grads_params", use_distributed_optimizer=True),
        dict(eval_interval=500, eval_iters=32),
        dict(tokenizer_type="HuggingFaceTokenizer", tokenizer_model="Qwen/Qwen3.5-35B-A3B",
             use_tokenizer_vocab_size=True),
        dict(save_interval=500, save="nemo_experiments/default/checkpoints",
             load="nemo_experiments/default/checkpoints", ckpt_format="torch_dist",
             fully_parallel_save=True),
        dict(log_interval=10, tensorboard_dir="nemo_experiments/default/tb_logs",
             log_timers_to_tensorboard=True),
        1234, "bf16_mixed"),
        {"model": dict(context_parallel_size=4, dynamic_context_parallel=True,
                       max_seqlen_per_dp_cp_rank=1024, calculate_per_token_loss=True,
                       moe_router_load_balancing_type="aux_loss"),
         "dataset": dict(enable_global_batch_packing=True),
         "ddp": dict(average_in_collective=False),
         "tokenizer": dict(use_tokenizer_vocab_size=False)}, 8)
    return out


def write(path, dump, header):
    with open(path, "w") as f:
        f.write(header)
        yaml.safe_dump(dump, f, default_flow_style=False)


def write_recipe(path, name, dump, edits, world, release):
    edited = copy.deepcopy(dump)
    applied = []
    for section_name, values in edits.items():
        for key, value in values.items():
            key = key if key in edited[section_name] else RENAMED.get(key, key)
            if key not in edited[section_name] and release:
                continue  # a field that release does not have (nor its recipe's setting)
            if key not in edited[section_name]:
                raise KeyError(f"{section_name}.{key}")
            edited[section_name][key] = value
            applied.append(f"#   {section_name}.{key}: {value}\n")
    write(path, edited,
          f"# {name} edited (Bridge keys only) for dynamic context parallelism here (world size {world}):\n"
          + "".join(applied)
          + (f"# The fields of Megatron-Bridge {release} (and PR #6127's dynamic-CP fields).\n"
             if release else "")
          + "# Written by tools/bridge/make_fixture_dumps.py; do not edit.\n")


def main():
    labels = [label for label in releases() if label[0].isdigit()]
    newest = labels[-1]
    fields = read_fields(newest)
    for name, (dump, edits, world) in dumps(fields).items():
        write(os.path.join(OUT, name + ".yaml"), dump,
              f"# Megatron-Bridge ConfigContainer dump of {name} (world size {world}).\n"
              "# Written by tools/bridge/make_fixture_dumps.py; do not edit.\n")
        write_recipe(os.path.join(OUT, name + "_dynamic_cp.yaml"), name, dump, edits, world, None)
    # The same recipe as each older release (and main) dumps it: that release's fields and
    # defaults, the recipe's settings where the release has the field.
    os.makedirs(os.path.join(OUT, "releases"), exist_ok=True)
    for label in releases():
        if label == newest:
            continue
        older = read_fields(label)
        older["_older"] = label
        dump, edits, world = dumps(older)[RELEASE_RECIPE]
        for name, since in TOP_LEVEL_SINCE.items():
            if version(label) < version(since):
                del dump[name]
        write_recipe(os.path.join(OUT, "releases", f"{RELEASE_RECIPE}_dynamic_cp_{label}.yaml"),
                     RELEASE_RECIPE, dump, edits, world, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
