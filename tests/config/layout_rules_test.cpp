// The rules on the parallel layout's tensor and pipeline dimensions: a valid case and an
// invalid case whose error names the key, the value and what would work. The base recipe
// (config_test_helpers.hpp) is valid for 4 ranks: dp 2 x cp 2, dynamic CP.

#include <catch2/catch.hpp>

#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp::config;
using Catch::Contains;
using test::resolved;

TEST_CASE("rule: sequence parallelism needs tp > 1", "[config]") {
  REQUIRE_NOTHROW(resolved({"model.tensor_model_parallel_size=1"}));
  REQUIRE_THROWS_WITH(resolved({"model.sequence_parallel=true"}),
                      Contains("model.sequence_parallel: true: needs "
                               "model.tensor_model_parallel_size > 1"));
}

TEST_CASE("rule: tp x cp x dp is the world, TP fastest; etp defaults to tp", "[config][tp]") {
  const auto config = resolved({"model.tensor_model_parallel_size=2"}, 8);
  CHECK(config.layout.world_size == 8);
  CHECK(config.layout.tensor_model_parallel_size == 2);
  CHECK(config.layout.data_parallel_size == 2);
  CHECK(config.layout.pool_size == 4);
  CHECK(config.layout.expert_tensor_parallel_size == 2);  // Megatron: unset etp = tp
  CHECK(config.layout.expert_data_parallel_size == 2);    // world 8 / (etp 2 x ep 2)
  CHECK(config.layout.alignment_multiple == 8);           // 2 x dp x cp: no SP
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{1, 2, 4});

  const auto whole_experts =
      resolved({"model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=1"}, 8);
  CHECK(whole_experts.layout.expert_tensor_parallel_size == 1);
  CHECK(whole_experts.layout.expert_data_parallel_size == 4);  // world 8 / ep 2

  // Sequence parallelism multiplies the pool multiple by tp: 2 x dp x cp x tp.
  const auto sequence_parallel =
      resolved({"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"}, 8);
  CHECK(sequence_parallel.layout.alignment_multiple == 16);
  CHECK(sequence_parallel.dataset.global_batch_packing_pad_to_multiple_of == 16);
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                "model.seq_length=264", "model.max_seqlen_per_dp_cp_rank=132"},
               8),
      Contains("model.seq_length: 264: must be a multiple of the alignment "
               "multiple 16 (2 x dp x cp x tp)"));
}

TEST_CASE("rule: TP sizes the model or the world cannot take name the key, value and fix",
          "[config][tp]") {
  // 2 K/V heads: Megatron splits the query groups and never replicates them.
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=4"}, 16),
      Contains("model.tensor_model_parallel_size: 4: must divide model.num_key_value_heads = 2") &&
          Contains("tp values that work for this model on 16 ranks with cp 2: 1, 2"));
  REQUIRE_THROWS_WITH(resolved({"model.tensor_model_parallel_size=2", "model.vocab_size=511"}, 8),
                      Contains("must divide model.vocab_size = 511") &&
                          Contains("tp values that work for this model on 8 ranks with cp 2: 1"));
  REQUIRE_THROWS_WITH(resolved({"model.tensor_model_parallel_size=2", "model.num_attention_heads=3",
                                "model.num_key_value_heads=1", "model.head_dim=16"},
                               8),
                      Contains("must divide model.num_attention_heads = 3"));
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2"}, 5),
      Contains("model.tensor_model_parallel_size: 2: must divide the world size 5"));
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2", "model.context_parallel_size=4"}, 4),
      Contains("model.context_parallel_size: 4: must divide world 4 / "
               "tensor_model_parallel_size 2 = 2"));
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=3"}, 8),
      Contains("model.expert_tensor_parallel_size: 3: must be 1") &&
          Contains("or tensor_model_parallel_size 2"));
  REQUIRE_THROWS_WITH(resolved({"model.expert_tensor_parallel_size=2"}),
                      Contains("model.expert_tensor_parallel_size: 2: must be 1"));
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2", "model.moe_intermediate_size=33"}, 8),
      Contains("model.expert_tensor_parallel_size: 2: must divide model.moe_intermediate_size = "
               "33"));
  // EP 4 with each expert split in 2 needs 8 ranks for the experts alone.
  REQUIRE_THROWS_WITH(
      resolved({"model.tensor_model_parallel_size=2", "model.expert_model_parallel_size=8"}, 8),
      Contains("model.expert_model_parallel_size: 8: expert_tensor_parallel_size 2 x 8 must "
               "divide the world size 8"));
  REQUIRE_NOTHROW(
      resolved({"model.tensor_model_parallel_size=2", "model.expert_model_parallel_size=8",
                "model.expert_tensor_parallel_size=1"},
               8));
}

TEST_CASE("rule: tensor and sequence parallelism train (nothing left unbuilt)", "[config][tp]") {
  CHECK(unbuilt_features(
            resolved({"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"}, 8))
            .empty());
  CHECK(unbuilt_features(
            resolved({"model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=1"},
                     8))
            .empty());
}

TEST_CASE("rule: world = pp x dp x cp, each stage with its own pool", "[config]") {
  // 8 ranks, pp 2: each stage is a dp 2 x cp 2 pool.
  const auto config = resolved({"model.pipeline_model_parallel_size=2"}, 8);
  CHECK(config.layout.world_size == 8);
  CHECK(config.layout.pipeline_model_parallel_size == 2);
  CHECK(config.layout.data_parallel_size == 2);
  CHECK(config.layout.pool_size == 4);
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{1, 2, 4});
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=3"}, 8),
                      Contains("model.pipeline_model_parallel_size: 3: must divide the world "
                               "size 8"));
  // pp 4 on 8 ranks leaves 2 per stage: cp 2 fits, cp 4 does not.
  REQUIRE_THROWS_WITH(
      resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=4",
                "model.context_parallel_size=4", "model.dynamic_context_parallel=false",
                "model.sequence_packing_scheduler=dp_balanced"},
               4),
      Contains("model.context_parallel_size: 4: must divide the 2 ranks of one pipeline stage"));
}

TEST_CASE("rule: the layers divide over the pipeline stages", "[config]") {
  // 2 layers over 4 stages.
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=4"}, 16),
                      Contains("model.num_hidden_layers: 2: the layers, 2, must divide evenly "
                               "over model.pipeline_model_parallel_size 4"));
  REQUIRE_NOTHROW(
      resolved({"model.pipeline_model_parallel_size=4", "model.num_hidden_layers=4"}, 16));
  // With the embedding and the loss counted, 6 layers + 2 divide over 4 stages.
  REQUIRE_NOTHROW(resolved({"model.pipeline_model_parallel_size=4", "model.num_hidden_layers=6",
                            "model.account_for_embedding_in_pipeline_split=true",
                            "model.account_for_loss_in_pipeline_split=true"},
                           16));
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=4", "model.num_hidden_layers=4",
                                "model.account_for_embedding_in_pipeline_split=true"},
                               16),
                      Contains("model.num_hidden_layers: 4") && Contains("5, must divide evenly"));
}

TEST_CASE("rule: virtual pipeline chunks need pp > 1, divisible stages and pp microbatches",
          "[config]") {
  REQUIRE_THROWS_WITH(resolved({"model.virtual_pipeline_model_parallel_size=2"}),
                      Contains("model.virtual_pipeline_model_parallel_size: 2: virtual pipeline "
                               "chunks interleave pipeline stages and need "
                               "model.pipeline_model_parallel_size > 1"));
  REQUIRE_NOTHROW(resolved({"model.virtual_pipeline_model_parallel_size=1"}));
  // 6 layers over 2 stages: 3 a stage, not divisible into 2 chunks.
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=6",
                                "model.virtual_pipeline_model_parallel_size=2"},
                               8),
                      Contains("model.virtual_pipeline_model_parallel_size: 2: stage 0 holds 3 "
                               "layers"));
  REQUIRE_NOTHROW(resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=8",
                            "model.virtual_pipeline_model_parallel_size=2"},
                           8));
  // Static CP, dp 2: 2 samples form at most 1 microbatch, fewer than pp = 2.
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=8",
                                "model.virtual_pipeline_model_parallel_size=2",
                                "train.global_batch_size=2", "model.dynamic_context_parallel=false",
                                "model.sequence_packing_scheduler=dp_balanced"},
                               8),
                      Contains("train.global_batch_size: 2: interleaved 1F1B") &&
                          Contains("needs at least pp = 2 microbatches per step") &&
                          Contains("at most 1"));
}

TEST_CASE("rule: uneven first and last stages", "[config]") {
  // 8 layers over 4 stages: 1 first, 1 last, 3 each in the middle.
  const auto config = resolved(
      {"model.pipeline_model_parallel_size=4", "model.num_hidden_layers=8",
       "model.num_layers_in_first_pipeline_stage=1", "model.num_layers_in_last_pipeline_stage=1"},
      16);
  CHECK(config.model.num_layers_in_first_pipeline_stage == 1);
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=4", "model.num_hidden_layers=8",
                                "model.num_layers_in_first_pipeline_stage=3"},
                               16),
                      Contains("model.num_layers_in_first_pipeline_stage: 3") &&
                          Contains("leaves 5 layers, which must divide evenly"));
  REQUIRE_THROWS_WITH(resolved({"model.num_layers_in_last_pipeline_stage=1"}),
                      Contains("model.num_layers_in_last_pipeline_stage: 1: sizes a stage of a "
                               "pipeline and needs model.pipeline_model_parallel_size > 1"));
  REQUIRE_THROWS_WITH(resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=4",
                                "model.num_layers_in_first_pipeline_stage=1",
                                "model.account_for_loss_in_pipeline_split=true"},
                               8),
                      Contains("model.account_for_loss_in_pipeline_split: true: cannot be "
                               "combined with an uneven first / last stage"));
}

TEST_CASE("pp > 1 trains, with every setting it composes with", "[config]") {
  for (const auto& settings : std::vector<std::vector<std::string>>{
           {},
           {"ddp.overlap_grad_reduce=true"},
           {"ddp.overlap_grad_reduce=true", "ddp.use_distributed_optimizer=true"},
           {"checkpoint.sharded=false", "checkpoint.save=/tmp/ckpt"}}) {
    std::vector<std::string> overrides = {"model.pipeline_model_parallel_size=2"};
    overrides.insert(overrides.end(), settings.begin(), settings.end());
    CHECK(unbuilt_features(resolved(overrides, 8)).empty());
  }
}

TEST_CASE("the layout description names the stages and the layer split", "[config]") {
  const auto config = resolved({"model.pipeline_model_parallel_size=2", "model.num_hidden_layers=8",
                                "model.virtual_pipeline_model_parallel_size=2"},
                               8);
  const std::string text = describe_layout(config);
  CHECK_THAT(text, Contains("pipeline parallel (pp):  2 stages") &&
                       Contains("2 virtual chunk(s) per stage") &&
                       Contains("stage 1: 4 layers chunk 0 [2, 4), chunk 1 [6, 8) + final norm"));
  CHECK_THAT(describe_layout(resolved()), !Contains("pipeline parallel"));
}

TEST_CASE("rule: world = pp x dp x cp x tp: a TP-fastest stage per pipeline stage",
          "[config][tp]") {
  // 16 ranks, pp 2, tp 2: each stage has 8 ranks, a dp 2 x cp 2 pool per TP rank.
  const auto config =
      resolved({"model.pipeline_model_parallel_size=2", "model.tensor_model_parallel_size=2"}, 16);
  CHECK(config.layout.world_size == 16);
  CHECK(config.layout.pipeline_model_parallel_size == 2);
  CHECK(config.layout.tensor_model_parallel_size == 2);
  CHECK(config.layout.data_parallel_size == 2);
  CHECK(config.layout.pool_size == 4);
  CHECK(config.layout.expert_data_parallel_size == 2);  // stage 8 / (etp 2 x ep 2)
  CHECK(config.layout.dynamic_group_sizes == std::vector<std::int64_t>{1, 2, 4});
  CHECK_THAT(describe_layout(config), Contains("pp x dp x cp x tp: TP fastest, stage slowest"));
  // 8 ranks, pp 2 x tp 2 leaves 2 per TP rank and stage: cp 2 fits with dp 1, cp 4 does not.
  CHECK(resolved({"model.pipeline_model_parallel_size=2", "model.tensor_model_parallel_size=2"}, 8)
            .layout.data_parallel_size == 1);
  REQUIRE_THROWS_WITH(
      resolved({"model.pipeline_model_parallel_size=2", "model.tensor_model_parallel_size=2",
                "model.context_parallel_size=4", "model.dynamic_context_parallel=false",
                "model.sequence_packing_scheduler=dp_balanced"},
               8),
      Contains("model.context_parallel_size: 4: must divide 4 ranks (one pipeline stage) / "
               "tensor_model_parallel_size 2 = 2"));
}
