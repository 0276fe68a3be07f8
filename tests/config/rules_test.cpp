// Each validation rule: a valid case and an invalid case whose error names the key.
// The base recipe (config_test_helpers.hpp) is valid for 4 ranks: dp 2 x cp 2, dynamic CP.

#include <catch2/catch.hpp>

#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp::config;
using Catch::Contains;
using test::resolved;

TEST_CASE("the base recipe resolves and derives the layout", "[config]") {
  const auto config = resolved();
  CHECK(config.layout.world_size == 4);
  CHECK(config.layout.data_parallel_size == 2);
  CHECK(config.layout.pool_size == 4);
  CHECK(config.layout.expert_data_parallel_size == 2);
  CHECK(config.layout.alignment_multiple == 8);  // 2 x dp x cp
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{1, 2, 4});
  CHECK(config.model.sequence_packing_scheduler == PackingScheduler::default_dynamic_cp);
  CHECK(config.dataset.global_batch_packing_pad_to_multiple_of == 8);
  CHECK(config.scheduler.lr_decay_iters == 10);
  CHECK(config.model.architecture.head_dim == 16);
}

TEST_CASE("rule: the world size is divisible by cp", "[config]") {
  REQUIRE_NOTHROW(resolved({"model.context_parallel_size=4"}, 4));
  REQUIRE_THROWS_WITH(resolved({"model.context_parallel_size=3"}, 4),
                      Contains("model.context_parallel_size: 3: must divide the world size 4"));
  REQUIRE_THROWS_WITH(resolved({}, 0), Contains("world size"));
}

TEST_CASE("rule: the global batch is divisible by dp", "[config]") {
  REQUIRE_NOTHROW(resolved({"train.global_batch_size=2"}));
  REQUIRE_THROWS_WITH(resolved({"train.global_batch_size=15"}),
                      Contains("train.global_batch_size: 15: must be divisible by dp = 2"));
}

TEST_CASE("rule: micro batch size 1, per-token loss, no averaging in the collective", "[config]") {
  REQUIRE_NOTHROW(resolved({"train.micro_batch_size=1", "model.calculate_per_token_loss=true",
                            "ddp.average_in_collective=false"}));
  REQUIRE_THROWS_WITH(resolved({"train.micro_batch_size=2"}),
                      Contains("train.micro_batch_size: 2: must be 1"));
  REQUIRE_THROWS_WITH(resolved({"model.calculate_per_token_loss=false"}),
                      Contains("model.calculate_per_token_loss: false: must be true"));
  REQUIRE_THROWS_WITH(resolved({"ddp.average_in_collective=true"}),
                      Contains("ddp.average_in_collective: true: must be false"));
}

TEST_CASE(
    "rule: the parameter gather overlaps only the distributed optimizer's gather, in the "
    "reduction's buckets",
    "[config]") {
  const auto both = resolved({"ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=true",
                              "ddp.overlap_param_gather=true"});
  CHECK(both.ddp.overlap_param_gather);
  REQUIRE_THROWS_WITH(
      resolved({"ddp.overlap_grad_reduce=true", "ddp.overlap_param_gather=true"}),
      Contains("ddp.overlap_param_gather: true: needs ddp.use_distributed_optimizer=true"));
  REQUIRE_THROWS_WITH(
      resolved({"ddp.use_distributed_optimizer=true", "ddp.overlap_param_gather=true"}),
      Contains("ddp.overlap_param_gather: true: needs ddp.overlap_grad_reduce=true"));
}

TEST_CASE("rule: the shared-expert overlap needs a shared expert", "[config]") {
  REQUIRE_THROWS_WITH(resolved({"model.moe_shared_expert_overlap=true"}),
                      Contains("model.moe_shared_expert_overlap: true: the model has no shared "
                               "expert"));
  const auto hybrid =
      resolved({"model.model_type=qwen3_5_moe_text", "model.full_attention_interval=2",
                "model.partial_rotary_factor=0.25", "model.shared_expert_intermediate_size=24",
                "model.moe_shared_expert_overlap=true"});
  CHECK(hybrid.model.moe_shared_expert_overlap);
}

TEST_CASE("rule: dataloader single or cyclic", "[config]") {
  REQUIRE_NOTHROW(resolved({"dataset.dataloader_type=cyclic"}));
  REQUIRE_THROWS_WITH(resolved({"dataset.dataloader_type=batch"}),
                      Contains("dataset.dataloader_type: batch: must be single or cyclic"));
}

TEST_CASE("rule: global-batch packing is the only data path", "[config]") {
  REQUIRE_NOTHROW(resolved({"dataset.enable_global_batch_packing=true"}));
  REQUIRE_THROWS_WITH(resolved({"dataset.enable_global_batch_packing=false"}),
                      Contains("dataset.enable_global_batch_packing: false: global-batch packing "
                               "is the only data path"));
  REQUIRE_THROWS_WITH(resolved({"dataset.enable_global_batch_packing=false",
                                "model.sequence_packing_scheduler=cost_aware"}),
                      Contains("model.sequence_packing_scheduler: cost_aware: a packing scheduler "
                               "runs only with dataset.enable_global_batch_packing=true"));
}

TEST_CASE("rule: the scheduler follows dynamic_context_parallel", "[config]") {
  CHECK(resolved({"model.dynamic_context_parallel=false"}).model.sequence_packing_scheduler ==
        PackingScheduler::dp_balanced);
  CHECK(
      resolved({"model.sequence_packing_scheduler=cost_aware"}).model.sequence_packing_scheduler ==
      PackingScheduler::cost_aware);
  REQUIRE_THROWS_WITH(resolved({"model.sequence_packing_scheduler=dp_balanced"}),
                      Contains("model.sequence_packing_scheduler: dp_balanced: contradicts "
                               "model.dynamic_context_parallel=true"));
  REQUIRE_THROWS_WITH(resolved({"model.dynamic_context_parallel=false",
                                "model.sequence_packing_scheduler=default_dynamic_cp"}),
                      Contains("model.sequence_packing_scheduler: default_dynamic_cp"));
  REQUIRE_THROWS_WITH(resolved({"model.dynamic_context_parallel=false",
                                "model.sequence_packing_scheduler=cost_aware"}),
                      Contains("model.sequence_packing_scheduler: cost_aware"));
}

TEST_CASE("rule: dynamic CP needs a power-of-two pool of at least 2 ranks", "[config]") {
  REQUIRE_NOTHROW(
      resolved({"train.global_batch_size=18", "model.dynamic_context_parallel=false"}, 6));
  REQUIRE_THROWS_WITH(resolved({"train.global_batch_size=18"}, 6),
                      Contains("model.dynamic_context_parallel: true: needs a dp x cp pool that is "
                               "a power of two") &&
                          Contains("dp 3 x cp 2 = 6"));
  REQUIRE_THROWS_WITH(
      resolved({"model.context_parallel_size=1", "model.max_seqlen_per_dp_cp_rank=256"}, 1),
      Contains("model.dynamic_context_parallel: true"));
}

TEST_CASE("rule: min_dynamic_context_parallel_size is a power of two within the pool", "[config]") {
  const auto config = resolved({"model.min_dynamic_context_parallel_size=2"}, 8);
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{2, 4, 8});
  REQUIRE_THROWS_WITH(
      resolved({"model.min_dynamic_context_parallel_size=3"}),
      Contains("model.min_dynamic_context_parallel_size: 3: must be a power of two"));
  REQUIRE_THROWS_WITH(resolved({"model.min_dynamic_context_parallel_size=8"}),
                      Contains("model.min_dynamic_context_parallel_size: 8: must be <= the dp x cp "
                               "pool"));
}

TEST_CASE("rule: decentralized process groups are off", "[config]") {
  REQUIRE_NOTHROW(resolved({"dist.use_decentralized_pg=false"}));
  REQUIRE_THROWS_WITH(resolved({"dist.use_decentralized_pg=true"}),
                      Contains("dist.use_decentralized_pg: true: must be false"));
}

TEST_CASE("rule: max_seqlen_per_dp_cp_rank is set and the pool holds the longest sample",
          "[config]") {
  // Dynamic: the pool (4 ranks) counts; static: only cp (2 ranks).
  REQUIRE_NOTHROW(resolved({"model.max_seqlen_per_dp_cp_rank=64"}));
  REQUIRE_THROWS_WITH(resolved({"model.max_seqlen_per_dp_cp_rank=32"}),
                      Contains("model.max_seqlen_per_dp_cp_rank: 32: pool dp 2 x cp 2 = 4 ranks x "
                               "32 = 128 tokens < model.seq_length 256"));
  REQUIRE_NOTHROW(resolved({"model.dynamic_context_parallel=false"}));
  REQUIRE_THROWS_WITH(
      resolved({"model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=64"}),
      Contains("model.max_seqlen_per_dp_cp_rank: 64: cp 2 ranks"));
  REQUIRE_THROWS_WITH(resolved({"model.max_seqlen_per_dp_cp_rank=null"}),
                      Contains("model.max_seqlen_per_dp_cp_rank: null: must be set explicitly"));
}

TEST_CASE("rule: EP divides the pool and the number of experts", "[config]") {
  REQUIRE_NOTHROW(resolved({"model.expert_model_parallel_size=4"}));
  REQUIRE_THROWS_WITH(
      resolved({"model.expert_model_parallel_size=8"}),
      Contains("model.expert_model_parallel_size: 8: must divide the dp x cp pool"));
  REQUIRE_THROWS_WITH(
      resolved({"model.expert_model_parallel_size=4", "model.num_experts=6"}),
      Contains("model.expert_model_parallel_size: 4: must divide model.num_experts = 6"));
  REQUIRE_THROWS_WITH(resolved({"model.num_experts=0"}),
                      Contains("model.expert_model_parallel_size: 2: a dense model"));
}

TEST_CASE("rule: seq_length is a multiple of the derived alignment multiple", "[config]") {
  CHECK(resolved({"model.dynamic_context_parallel=false"}).layout.alignment_multiple == 4);
  CHECK(resolved({"model.dynamic_context_parallel=false", "model.context_parallel_size=1",
                  "model.max_seqlen_per_dp_cp_rank=256"})
            .layout.alignment_multiple == 1);
  CHECK(resolved({}, 8).layout.alignment_multiple == 16);
  REQUIRE_NOTHROW(resolved({"model.seq_length=264"}));
  REQUIRE_THROWS_WITH(
      resolved({"model.seq_length=260"}),
      Contains("model.seq_length: 260: must be a multiple of the alignment multiple 8"));
  CHECK(resolved({"dataset.global_batch_packing_pad_to_multiple_of=16", "packing.alignment=pool"})
            .layout.alignment_multiple == 16);
  REQUIRE_THROWS_WITH(resolved({"dataset.global_batch_packing_pad_to_multiple_of=12"}),
                      Contains("dataset.global_batch_packing_pad_to_multiple_of: 12: must be a "
                               "multiple of the required alignment 8"));
  REQUIRE_THROWS_WITH(resolved({"dataset.seq_length=512"}),
                      Contains("dataset.seq_length: 512: must be <= model.seq_length"));
}

TEST_CASE("rule: a2a needs heads that divide over every all-to-all group", "[config]") {
  REQUIRE_NOTHROW(resolved({"model.cp_comm_type=p2p"}));
  // 4 query, 2 K/V heads; dynamic groups of 1, 2, 4 on 4 ranks: K/V heads replicated at 4.
  REQUIRE_NOTHROW(resolved({"model.cp_comm_type=a2a"}));
  // 8 ranks: a dynamic group of 8 cannot split 4 query heads.
  const std::string over_eight = test::resolve_error({"model.cp_comm_type=a2a"}, 8);
  CHECK_THAT(over_eight,
             Contains("model.cp_comm_type: a2a") && Contains("model.num_attention_heads 4") &&
                 Contains("model.num_key_value_heads 2") && Contains("a CP group of 8 ranks"));
  // Static CP 4 of 8 ranks never forms a group of 8.
  REQUIRE_NOTHROW(resolved({"model.cp_comm_type=a2a", "model.dynamic_context_parallel=false",
                            "model.context_parallel_size=4", "model.max_seqlen_per_dp_cp_rank=64"},
                           8));
  // 3 K/V heads over 2 ranks: neither divides the other.
  CHECK_THAT(test::resolve_error({"model.cp_comm_type=a2a", "model.num_attention_heads=6",
                                  "model.num_key_value_heads=3"}),
             Contains("model.num_attention_heads 6") && Contains("model.num_key_value_heads 3") &&
                 Contains("a CP group of 2 ranks"));
  // The hybrid's DeltaNet heads follow the same rule.
  CHECK_THAT(
      test::resolve_error({"model.cp_comm_type=a2a", "model.model_type=qwen3_5_moe_text",
                           "model.full_attention_interval=2", "model.partial_rotary_factor=0.25",
                           "model.linear_num_key_heads=2", "model.linear_num_value_heads=2"},
                          4),
      Contains("model.linear_num_value_heads 2") && Contains("a CP group of 4 ranks"));
}

TEST_CASE("rule: a2a+p2p needs [inner, outer] sizes whose product is cp", "[config]") {
  // cp 2 (dynamic pool of 4): inner 2 forms all-to-all groups of at most 2.
  REQUIRE_NOTHROW(
      resolved({"model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[2, 1]"}));
  REQUIRE_NOTHROW(
      resolved({"model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[1, 2]"}));
  REQUIRE_THROWS_WITH(resolved({"model.cp_comm_type=a2a+p2p"}),
                      Contains("model.hierarchical_context_parallel_sizes: null") &&
                          Contains("two positive sizes [inner, outer]"));
  REQUIRE_THROWS_WITH(
      resolved({"model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[2, 2]"}),
      Contains("model.hierarchical_context_parallel_sizes: [2, 2]: inner x outer "
               "= 4 must equal model.context_parallel_size 2"));
  REQUIRE_THROWS_WITH(resolved({"model.cp_comm_type=all_gather",
                                "model.hierarchical_context_parallel_sizes=[2, 1]"}),
                      Contains("is used only by model.cp_comm_type=a2a+p2p"));
  // Only the inner all-to-all divides heads: on 8 ranks a dynamic group of 8 with inner 2 is
  // fine where plain a2a is not.
  REQUIRE_NOTHROW(resolved(
      {"model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[2, 1]"}, 8));
  CHECK_THAT(test::resolve_error(
                 {"model.cp_comm_type=a2a+p2p", "model.context_parallel_size=4",
                  "model.hierarchical_context_parallel_sizes=[4, 1]", "model.num_attention_heads=2",
                  "model.num_key_value_heads=2", "model.max_seqlen_per_dp_cp_rank=64"},
                 8),
             Contains("model.num_attention_heads 2") && Contains("an all-to-all group of 4 ranks"));
}

TEST_CASE("rule: model dimensions are consistent", "[config]") {
  REQUIRE_NOTHROW(resolved({"model.head_dim=0"}));
  REQUIRE_THROWS_WITH(resolved({"model.num_key_value_heads=3"}),
                      Contains("model.num_attention_heads: 4: must be divisible by "
                               "model.num_key_value_heads 3"));
  REQUIRE_THROWS_WITH(resolved({"model.num_experts_per_tok=9"}),
                      Contains("model.num_experts_per_tok: 9: must be <= model.num_experts 8"));
  REQUIRE_THROWS_WITH(resolved({"model.head_dim=0", "model.hidden_size=66"}),
                      Contains("model.head_dim: 0: cannot be derived"));
  REQUIRE_THROWS_WITH(resolved({"model.layer_types=[full_attention]"}),
                      Contains("model.layer_types: 1 entries"));
  REQUIRE_THROWS_WITH(resolved({"model.hidden_act=gelu"}), Contains("model.hidden_act: gelu"));
  // The GPU's MoE dispatch kernels have expert and top-k limits; the CPU path has none.
  REQUIRE_THROWS_WITH(resolved({"model.num_experts=64", "model.num_experts_per_tok=40"}),
                      Contains("model.moe_permute_fusion: true: the GPU's fused dispatch"));
  REQUIRE_NOTHROW(resolved(
      {"model.num_experts=64", "model.num_experts_per_tok=40", "model.moe_permute_fusion=false"}));
  REQUIRE_THROWS_WITH(resolved({"model.num_experts=2048", "model.moe_permute_fusion=false"}),
                      Contains("model.moe_permute_fusion: false: the GPU's unfused permutation"));
  REQUIRE_NOTHROW(resolved({"model.num_experts=2048"}));
  REQUIRE_NOTHROW(
      resolved({"model.num_experts=2048", "model.moe_permute_fusion=false", "dist.device=cpu"}));
  REQUIRE_THROWS_WITH(resolved({"model.mlp_only_layers=[5]"}),
                      Contains("model.mlp_only_layers: 5"));
  REQUIRE_THROWS_WITH(resolved({"model.model_type=qwen3_next", "model.linear_num_key_heads=2",
                                "model.linear_num_value_heads=5"}),
                      Contains("model.linear_num_value_heads: 5"));
  const auto hybrid =
      resolved({"model.model_type=qwen3_5_moe_text", "model.full_attention_interval=2",
                "model.partial_rotary_factor=0.25"});
  CHECK(hybrid.model.architecture.layer_types ==
        std::vector<LayerMixer>{LayerMixer::linear_attention, LayerMixer::full_attention});
}

TEST_CASE("rule: the data source matches the dataset type", "[config]") {
  REQUIRE_NOTHROW(resolved({"dataset.type=token_jsonl", "dataset.data_path=tokens.jsonl"}));
  REQUIRE_THROWS_WITH(resolved({"dataset.type=token_jsonl"}), Contains("dataset.data_path"));
  REQUIRE_THROWS_WITH(resolved({"dataset.type=chat_jsonl", "dataset.data_path=chat.jsonl"}),
                      Contains("tokenizer.tokenizer_type: NullTokenizer"));
  REQUIRE_THROWS_WITH(resolved({"dataset.type=chat_jsonl", "dataset.data_path=chat.jsonl",
                                "tokenizer.tokenizer_type=HuggingFaceTokenizer"}),
                      Contains("tokenizer.tokenizer_model"));
  REQUIRE_THROWS_WITH(resolved({"dataset.mock_length_distribution=normal(min=1)"}),
                      Contains("dataset.mock_length_distribution"));
  REQUIRE_THROWS_WITH(resolved({"dataset.mock_length_distribution=uniform(min=8,max=512)"}),
                      Contains("dataset.mock_length_distribution") && Contains("exceeds"));
}

TEST_CASE("rule: optimizer and LR schedule values are in range", "[config]") {
  REQUIRE_NOTHROW(resolved(
      {"optimizer.use_precision_aware_optimizer=true", "optimizer.exp_avg_dtype=bfloat16"}));
  REQUIRE_THROWS_WITH(resolved({"optimizer.lr=0"}), Contains("optimizer.lr: 0.0: must be > 0"));
  REQUIRE_THROWS_WITH(resolved({"optimizer.min_lr=1"}), Contains("optimizer.min_lr"));
  REQUIRE_THROWS_WITH(resolved({"optimizer.adam_beta2=1"}), Contains("optimizer.adam_beta2"));
  REQUIRE_THROWS_WITH(resolved({"optimizer.exp_avg_dtype=bfloat16"}),
                      Contains("optimizer.exp_avg_dtype: bfloat16: bf16 optimizer state needs "
                               "optimizer.use_precision_aware_optimizer=true"));
  REQUIRE_THROWS_WITH(resolved({"optimizer.exp_avg_sq_dtype=bfloat16"}),
                      Contains("optimizer.exp_avg_sq_dtype: bfloat16"));
  REQUIRE_THROWS_WITH(
      resolved({"scheduler.lr_warmup_iters=11"}),
      Contains("scheduler.lr_warmup_iters: 11: must be <= scheduler.lr_decay_iters 10"));
  REQUIRE_THROWS_WITH(resolved({"model.recompute_method=uniform"}),
                      Contains("model.recompute_method"));
  REQUIRE_THROWS_WITH(resolved({"model.recompute_granularity=full", "model.recompute_method=block",
                                "model.recompute_num_layers=99"}),
                      Contains("model.recompute_num_layers: 99: block recomputes the first n"));
  REQUIRE_THROWS_WITH(
      resolved({"model.recompute_granularity=full", "model.recompute_num_layers=0"}),
      Contains("model.recompute_num_layers (override 'model.recompute_num_layers=0'): 0: must be "
               "at least 1"));
  // Asynchronous saves are sharded ones: with the single writer asked for, refused.
  REQUIRE_THROWS_WITH(resolved({"checkpoint.async_save=true", "checkpoint.sharded=false"}),
                      Contains("checkpoint.async_save") && Contains("checkpoint.sharded is false"));
  CHECK(resolved({"checkpoint.async_save=true"}).checkpoint.sharded);
  REQUIRE_THROWS_WITH(resolved({"checkpoint.most_recent_k=0"}),
                      Contains("checkpoint.most_recent_k"));
  REQUIRE_THROWS_WITH(resolved({"packing.device_flops_per_second=0"}),
                      Contains("packing.device_flops_per_second"));
}

TEST_CASE("rule: the modelled step's peaks are positive and its efficiencies fractions",
          "[config]") {
  const auto config = resolved({"packing.step_model_dense_gemm_efficiency=0.35",
                                "packing.step_model_deltanet_kernel=token_by_token",
                                "packing.step_model_bf16_flops_per_second=9.89e14"});
  CHECK(config.packing.step_model_dense_gemm_efficiency == 0.35);
  CHECK(config.packing.step_model_deltanet_kernel == DeltaNetKernel::token_by_token);
  CHECK(config.packing.step_model_bf16_flops_per_second == 9.89e14);
  REQUIRE_THROWS_WITH(resolved({"packing.step_model_attention_efficiency=1.5"}),
                      Contains("packing.step_model_attention_efficiency"));
  REQUIRE_THROWS_WITH(resolved({"packing.step_model_memory_efficiency=0"}),
                      Contains("packing.step_model_memory_efficiency"));
  REQUIRE_THROWS_WITH(resolved({"packing.step_model_memory_bytes_per_second=0"}),
                      Contains("packing.step_model_memory_bytes_per_second"));
  REQUIRE_THROWS_WITH(resolved({"packing.step_model_launch_latency_seconds=-1e-6"}),
                      Contains("packing.step_model_launch_latency_seconds"));
  REQUIRE_THROWS_WITH(resolved({"packing.step_model_deltanet_kernel=wy"}),
                      Contains("packing.step_model_deltanet_kernel"));
}

TEST_CASE("several broken rules are all reported in one error", "[config]") {
  try {
    resolved({"model.sequence_parallel=true", "train.micro_batch_size=2",
              "model.calculate_per_token_loss=false", "dist.use_decentralized_pg=true",
              "model.seq_length=260", "model.num_experts_per_tok=9"});
    FAIL("expected a config error");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.kind() == dyncp::core::ErrorKind::config);
    CHECK(error.exit_code() == 2);
    const std::string message = error.what();
    CHECK_THAT(message, Contains("6 problems"));
    for (const char* key :
         {"model.sequence_parallel", "train.micro_batch_size", "model.calculate_per_token_loss",
          "dist.use_decentralized_pg", "model.seq_length", "model.num_experts_per_tok"}) {
      CHECK_THAT(message, Contains(std::string("\n  ") + key + ": "));
    }
  }
}

TEST_CASE("unbuilt features are listed with the keys that ask for them", "[config]") {
  CHECK(unbuilt_features(resolved()).empty());
  CHECK(unbuilt_features(resolved({"model.cp_comm_type=p2p"})).empty());  // the ring is built
  CHECK(unbuilt_features(resolved({"ddp.use_distributed_optimizer=true"})).empty());
  // The precision-aware optimizer (bf16 Adam moments) is built.
  const std::vector<std::string> bf16_moments = {"optimizer.use_precision_aware_optimizer=true",
                                                 "optimizer.exp_avg_dtype=bfloat16",
                                                 "optimizer.exp_avg_sq_dtype=bfloat16"};
  CHECK(unbuilt_features(resolved(bf16_moments)).empty());
  // bf16 mixed precision is built (docs/precision.md), with and without bf16 moments.
  auto overrides = bf16_moments;
  overrides.push_back("mixed_precision=bf16_mixed");
  CHECK(unbuilt_features(resolved(overrides)).empty());
  // Selective recomputation is built for core_attn, moe_act, layernorm, mlp and
  // shared_experts; Megatron's other modules are named with the list that asks for them.
  CHECK(unbuilt_features(
            resolved(
                {"model.recompute_granularity=selective",
                 "model.recompute_modules=[core_attn, moe_act, layernorm, mlp, shared_experts]"}))
            .empty());
  for (const std::string module : {"mla_up_proj", "moe"}) {
    INFO(module);
    const auto features =
        unbuilt_features(resolved({"model.recompute_granularity=selective",
                                   "model.recompute_modules=[moe_act, " + module + "]"}));
    REQUIRE(features.size() == 1);
    CHECK_THAT(features[0], Contains("selective recomputation of " + module +
                                     " (model.recompute_modules=[moe_act, " + module + "]"));
  }
}

TEST_CASE("selective recomputation: Megatron's default modules and its module names", "[config]") {
  // Unset recompute_modules is Megatron's default [core_attn].
  CHECK(resolved({"model.recompute_granularity=selective"}).model.recompute_modules ==
        std::vector<std::string>{"core_attn"});
  REQUIRE_THROWS_WITH(
      resolved({"model.recompute_granularity=selective", "model.recompute_modules=[moe_act, act]"}),
      Contains("model.recompute_modules") && Contains("act: not a module Megatron recomputes"));
  REQUIRE_THROWS_WITH(
      resolved({"model.recompute_granularity=full", "model.recompute_modules=[moe_act]"}),
      Contains("model.recompute_modules") &&
          Contains("only applies with model.recompute_granularity=selective"));
}

TEST_CASE("valid but suspicious settings give warnings", "[config]") {
  CHECK(config_warnings(resolved()).empty());
  const auto warnings =
      config_warnings(resolved({"model.max_position_embeddings=128", "validation.eval_interval=5",
                                "model.min_dynamic_context_parallel_size=4"}));
  REQUIRE(warnings.size() == 3);
  CHECK_THAT(warnings[0],
             Contains("model.seq_length 256 exceeds model.max_position_embeddings 128"));
  CHECK_THAT(warnings[1], Contains("no evaluation will run"));
  CHECK_THAT(warnings[2], Contains("equals the pool"));
}

TEST_CASE("rule: evaluation needs held-out data unless the data is mock", "[config]") {
  CHECK_NOTHROW(resolved({"validation.eval_interval=5", "validation.eval_iters=2"}));
  REQUIRE_THROWS_WITH(
      resolved({"validation.eval_interval=5", "validation.eval_iters=2", "dataset.type=token_jsonl",
                "dataset.data_path=train.jsonl"}),
      Contains("validation.eval_interval") && Contains("dataset.validation_data_path"));
  CHECK_NOTHROW(
      resolved({"validation.eval_interval=5", "validation.eval_iters=2", "dataset.type=token_jsonl",
                "dataset.data_path=train.jsonl", "dataset.validation_data_path=held_out.jsonl"}));
}

TEST_CASE("rule: packing.alignment defaults to per_group; a pool-wide pad_to needs pool",
          "[config]") {
  CHECK(resolved().packing.alignment == PackingAlignment::per_group);
  CHECK(resolved({"packing.alignment=pool"}).packing.alignment == PackingAlignment::pool);
  // The derived value (a resolved config reloaded) is accepted under per_group.
  REQUIRE_NOTHROW(resolved({"dataset.global_batch_packing_pad_to_multiple_of=8"}));
  REQUIRE_THROWS_WITH(resolved({"dataset.global_batch_packing_pad_to_multiple_of=16"}),
                      Contains("dataset.global_batch_packing_pad_to_multiple_of: 16: sets one "
                               "padding multiple for every sequence") &&
                          Contains("packing.alignment=pool"));
  // Static CP pads to 2 x cp in either mode: a pad_to is its business alone.
  REQUIRE_NOTHROW(resolved({"model.dynamic_context_parallel=false",
                            "dataset.global_batch_packing_pad_to_multiple_of=8"}));
  REQUIRE_THROWS_WITH(resolved({"packing.alignment=megatron"}),
                      Contains("packing.alignment") && Contains("per_group"));
}

TEST_CASE("rule: W&B needs the metrics file and a run name, and its options a project",
          "[config]") {
  const auto config = resolved({"logger.metrics_path=m.jsonl", "logger.wandb_project=p",
                                "logger.wandb_exp_name=run1", "logger.wandb_entity=team",
                                "logger.wandb_save_dir=wb"});
  CHECK(config.logger.wandb_project == "p");
  CHECK(config.logger.wandb_exp_name == "run1");
  CHECK(config.logger.wandb_entity == "team");
  CHECK(config.logger.wandb_save_dir == "wb");
  REQUIRE_THROWS_WITH(resolved({"logger.wandb_project=p", "logger.wandb_exp_name=run1"}),
                      Contains("logger.wandb_project: p: ") && Contains("logger.metrics_path"));
  REQUIRE_THROWS_WITH(resolved({"logger.wandb_project=p", "logger.metrics_path=m.jsonl"}),
                      Contains("logger.wandb_exp_name=NAME"));
  for (const char* key :
       {"logger.wandb_entity", "logger.wandb_exp_name", "logger.wandb_save_dir"}) {
    INFO(key);
    REQUIRE_THROWS_WITH(resolved({std::string(key) + "=x", "logger.metrics_path=m.jsonl"}),
                        Contains(std::string(key) + ": x: has no effect without "
                                                    "logger.wandb_project"));
  }
}

TEST_CASE(
    "rule: a config.json sliding window runs with and without CP; dynamic RoPE past its "
    "context",
    "[config][hf_fields]") {
  const std::string fixtures = std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/model/";
  const std::string window = "model.hf_model_path=" + fixtures + "qwen3_moe_sliding_window";
  // The base recipe runs dynamic CP over dp 2 x cp 2: every CP exchange honours the window.
  REQUIRE_NOTHROW(resolved({window}));
  for (const char* type : {"all_gather", "p2p", "a2a"}) {
    INFO(type);
    REQUIRE_NOTHROW(resolved({window, std::string("model.cp_comm_type=") + type,
                              "model.dynamic_context_parallel=false"}));
  }
  REQUIRE_NOTHROW(resolved(
      {window, "model.context_parallel_size=1", "model.dynamic_context_parallel=false",
       "model.max_seqlen_per_dp_cp_rank=256", "model.sequence_packing_scheduler=dp_balanced"}));
  const std::string dynamic = "model.hf_model_path=" + fixtures + "qwen3_moe_rope_dynamic";
  REQUIRE_NOTHROW(resolved(
      {dynamic, "model.seq_length=64", "dataset.mock_length_distribution=uniform(min=8,max=64)"}));
  // Past max_position_embeddings (32) each sequence gets its own frequencies (docs/model.md).
  REQUIRE_NOTHROW(resolved({dynamic, "model.seq_length=256",
                            "dataset.mock_length_distribution=uniform(min=8,max=256)"}));
}
