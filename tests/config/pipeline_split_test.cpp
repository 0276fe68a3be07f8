// Megatron's split of the layers over pipeline stages and virtual chunks (config/pipeline_split).

#include "config/pipeline_split.hpp"

#include <catch2/catch.hpp>

#include "config/model_architecture.hpp"
#include "core/error.hpp"

using namespace dyncp::config;

namespace {

// (first layer, count) of every chunk in virtual-stage order.
std::vector<std::pair<std::int64_t, std::int64_t>> runs(const PipelineSplit& split) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const LayerChunk& c : split.chunks) out.emplace_back(c.first_layer, c.num_layers);
  return out;
}

using Runs = std::vector<std::pair<std::int64_t, std::int64_t>>;

}  // namespace

TEST_CASE("an even split gives every stage num_layers / pp contiguous layers", "[config]") {
  const PipelineSplit split = split_layers({.num_layers = 8, .pipeline_size = 4});
  CHECK(runs(split) == Runs{{0, 2}, {2, 2}, {4, 2}, {6, 2}});
  CHECK(split.chunks.front().holds_embedding);
  CHECK(split.chunks.back().holds_loss);
  CHECK_FALSE(split.chunks[1].holds_embedding);
  CHECK(split.layers_of_stage(3) == 2);
}

TEST_CASE("account_for_embedding / loss take a layer's slot on the first / last stage",
          "[config]") {
  // 6 layers + embedding + loss = 8 slots over 4 stages: 1, 2, 2, 1 layers.
  const PipelineSplit both = split_layers({.num_layers = 6,
                                           .pipeline_size = 4,
                                           .account_for_embedding = true,
                                           .account_for_loss = true});
  CHECK(runs(both) == Runs{{0, 1}, {1, 2}, {3, 2}, {5, 1}});
  // Embedding only: 7 + 1 over 4: 1, 2, 2, 2.
  const PipelineSplit embedding =
      split_layers({.num_layers = 7, .pipeline_size = 4, .account_for_embedding = true});
  CHECK(runs(embedding) == Runs{{0, 1}, {1, 2}, {3, 2}, {5, 2}});
  // Without the flag, 7 layers do not divide over 4 stages.
  CHECK_THROWS_WITH(split_layers({.num_layers = 7, .pipeline_size = 4}),
                    Catch::Contains("model.num_hidden_layers"));
}

TEST_CASE("uneven first and last stages, the rest even over the middle", "[config]") {
  const PipelineSplit split = split_layers(
      {.num_layers = 10, .pipeline_size = 4, .first_stage_layers = 2, .last_stage_layers = 2});
  CHECK(runs(split) == Runs{{0, 2}, {2, 3}, {5, 3}, {8, 2}});
  // pp 2 with only a first stage: the last takes the rest.
  CHECK(runs(split_layers({.num_layers = 5, .pipeline_size = 2, .first_stage_layers = 1})) ==
        Runs{{0, 1}, {1, 4}});
  // pp 2 with both set: they must add up to the model.
  CHECK_THROWS_WITH(
      split_layers(
          {.num_layers = 5, .pipeline_size = 2, .first_stage_layers = 1, .last_stage_layers = 1}),
      Catch::Contains("model.num_layers_in_first_pipeline_stage"));
}

TEST_CASE("virtual chunks follow Megatron's virtual-stage order", "[config]") {
  // 8 layers, pp 2, vpp 2: virtual stage k = v * pp + s holds layers [2k, 2k + 2):
  // stage 0 runs [0, 2) and [4, 6), stage 1 [2, 4) and [6, 8).
  const PipelineSplit split =
      split_layers({.num_layers = 8, .pipeline_size = 2, .virtual_size = 2});
  CHECK(runs(split) == Runs{{0, 2}, {2, 2}, {4, 2}, {6, 2}});
  CHECK(split.chunk(0, 1).first_layer == 4);
  CHECK(split.chunk(1, 0).first_layer == 2);
  CHECK(split.chunk(1, 1).holds_loss);
  CHECK(split.layers_of_stage(0) == 4);
  CHECK_THAT(split.describe(), Catch::Contains("stage 0: 4 layers chunk 0 [0, 2) + embedding, "
                                               "chunk 1 [4, 6)"));
  // Uneven with vpp: each stage's layers divide into the chunks (Megatron's offsets).
  const PipelineSplit uneven = split_layers({.num_layers = 12,
                                             .pipeline_size = 3,
                                             .virtual_size = 2,
                                             .first_stage_layers = 2,
                                             .last_stage_layers = 2});
  // Stage layers 2, 8, 2; per chunk 1, 4, 1: runs in k order 1, 4, 1, 1, 4, 1.
  CHECK(runs(uneven) == Runs{{0, 1}, {1, 4}, {5, 1}, {6, 1}, {7, 4}, {11, 1}});
  CHECK_THROWS_WITH(split_layers({.num_layers = 6, .pipeline_size = 2, .virtual_size = 2}),
                    Catch::Contains("model.virtual_pipeline_model_parallel_size: 2: stage 0 "
                                    "holds 3 layers"));
}

TEST_CASE("every layer runs exactly once, in order, so hybrid layer types keep their order",
          "[config]") {
  ModelArchitecture arch;
  arch.model_type = "qwen3_5_moe";
  arch.num_hidden_layers = 12;
  arch.full_attention_interval = 4;
  arch.resolve();
  REQUIRE(arch.is_hybrid());
  for (const PipelineSplitInput& input :
       {PipelineSplitInput{.num_layers = 12, .pipeline_size = 4},
        PipelineSplitInput{.num_layers = 12, .pipeline_size = 2, .virtual_size = 3},
        PipelineSplitInput{
            .num_layers = 12, .pipeline_size = 3, .first_stage_layers = 2, .last_stage_layers = 6},
        PipelineSplitInput{.num_layers = 12,
        .pipeline_size = 2,
        .virtual_size = 7,
        .account_for_embedding = true,
        .account_for_loss = true}}) {
    const PipelineSplit split = split_layers(input);
    // Concatenating the chunks in virtual-stage order gives the model's layers 0..L-1, and each
    // chunk's mixers are the global pattern's.
    std::vector<LayerMixer> concatenated;
    std::int64_t next = 0;
    for (const LayerChunk& c : split.chunks) {
      CHECK(c.first_layer == next);
      for (std::int64_t l = c.first_layer; l < c.first_layer + c.num_layers; ++l)
        concatenated.push_back(arch.mixer_of_layer(l));
      next += c.num_layers;
    }
    CHECK(next == 12);
    CHECK(concatenated == arch.layer_types);
  }
}
