// The parallel plan: one value built from the config and the world that the run, the dry run and
// the start-up log ask about layout.

#include "parallel/parallel_plan.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "packing/alignment.hpp"
#include "smoke_recipe.hpp"

using namespace dyncp;
using Catch::Matchers::Contains;
using test::smoke_config;

TEST_CASE("parallel plan: sizes, coordinates, experts and capacity of one rank", "[train][plan]") {
  const auto config = smoke_config(8);
  const parallel::ParallelPlan plan = parallel::make_parallel_plan(config, 8, 5);
  CHECK(plan.world_size == 8);
  CHECK(plan.rank == 5);
  CHECK(plan.layout.data_parallel_size == 4);
  CHECK(plan.layout.context_parallel_size == 2);
  CHECK(plan.layout.expert_model_parallel_size == 2);
  CHECK(plan.layout.dynamic_context_parallel);
  // CP fastest: rank 5 = dp index 2 x cp 2 + cp index 1; EP groups [4, 5] -> position 1.
  CHECK(plan.coordinates.data_parallel_index == 2);
  CHECK(plan.coordinates.context_parallel_index == 1);
  CHECK(plan.coordinates.expert_parallel_index == 1);
  CHECK(plan.experts.first == 4);
  CHECK(plan.experts.count == 4);
  CHECK(plan.scheduler == config::PackingScheduler::default_dynamic_cp);
  CHECK(plan.max_seqlen_per_dp_cp_rank == 128);
  // Dynamic CP: the largest group is the pool; per-group alignment pads it to 2 x 8.
  CHECK(plan.largest_cp_group() == 8);
  CHECK(plan.largest_group_tokens() == 8 * 128);
  CHECK(plan.largest_group_multiple() == 16);
  CHECK(plan.group(dist::GroupAxis::context_parallel).ranks() == std::vector<int>{4, 5});
  CHECK(plan.group(dist::GroupAxis::data_parallel).ranks() == std::vector<int>{1, 3, 5, 7});
}

TEST_CASE("parallel plan: agrees with the resolved config's layout and padding rule",
          "[train][plan]") {
  for (const std::int64_t world : {2, 4, 8}) {
    const auto config = smoke_config(world);
    for (int rank = 0; rank < world; ++rank) {
      const parallel::ParallelPlan plan =
          parallel::make_parallel_plan(config, static_cast<int>(world), rank);
      CHECK(plan.layout.pool_size() == config.layout.pool_size);
      CHECK(plan.layout.data_parallel_size == config.layout.data_parallel_size);
      CHECK(plan.layout.expert_model_parallel_size == config.layout.expert_model_parallel_size);
      const packing::AlignmentRule rule = packing::alignment_rule(config);
      CHECK(plan.alignment.mode == rule.mode);
      CHECK(plan.alignment.pool_multiple == rule.pool_multiple);
      for (const dist::GroupAxis axis : dist::all_group_axes)
        CHECK(plan.group(axis) == dist::group_of(plan.layout, axis, rank));
    }
  }
}

TEST_CASE("parallel plan: the experts of an EP group tile every expert once", "[train][plan]") {
  const auto config = smoke_config(8);
  std::vector<int> owner(8, -1);
  for (int rank = 0; rank < 2; ++rank) {  // ranks 0 and 1 form the first EP group
    const parallel::ParallelPlan plan = parallel::make_parallel_plan(config, 8, rank);
    for (std::int64_t e = plan.experts.first; e < plan.experts.first + plan.experts.count; ++e) {
      CHECK(owner[static_cast<std::size_t>(e)] == -1);
      owner[static_cast<std::size_t>(e)] = rank;
    }
  }
  for (const int rank : owner) CHECK(rank >= 0);
  CHECK_THROWS_WITH(parallel::expert_range_of(8, 3, 0),
                    Contains("model.expert_model_parallel_size") && Contains("must divide"));
}

TEST_CASE("parallel plan: static CP, its scheduler and its largest group", "[train][plan]") {
  const auto config =
      smoke_config(4, {"model.dynamic_context_parallel=false",
                       "model.sequence_packing_scheduler=dp_balanced", "model.seq_length=256"});
  const parallel::ParallelPlan plan = parallel::make_parallel_plan(config, 4, 0);
  CHECK_FALSE(plan.layout.dynamic_context_parallel);
  CHECK(plan.scheduler == config::PackingScheduler::dp_balanced);
  CHECK(plan.largest_cp_group() == 2);
  CHECK(plan.largest_group_tokens() == 2 * 128);
  CHECK(parallel::summarize_parallel_plan(plan) ==
        "world 4 = dp 2 x cp 2, ep 2, static CP, alignment multiple 4");
}

TEST_CASE("parallel plan: the start-up line and rank 0's groups as the dry run prints them",
          "[train][plan]") {
  const auto config = smoke_config(4);
  const parallel::ParallelPlan plan = parallel::make_parallel_plan(config, 4, 3);
  CHECK(parallel::summarize_parallel_plan(plan) ==
        "world 4 = dp 2 x cp 2, ep 2, dynamic CP, alignment per group (2 x group size)");
  const std::string groups = parallel::describe_rank_groups(plan, 8);
  CHECK_THAT(groups, Contains("groups of rank 3 (dp index 1, cp index 1, ep index 1"));
  CHECK_THAT(groups, Contains("context_parallel:         [2, 3]"));
  CHECK_THAT(groups, Contains("dynamic CP size 4:        [0, 1, 2, 3]"));
  CHECK_THAT(groups, Contains("experts:                  [4, 8) of 8"));
}

TEST_CASE("parallel plan: under TP the plan names the TP rank, its pool and the SP alignment",
          "[train][plan][tp]") {
  const auto config =
      smoke_config(16, {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                        "model.expert_tensor_parallel_size=1"});
  // Rank 5 = pool rank 2 (dp index 1, cp index 0) x tp 2 + tp index 1.
  const parallel::ParallelPlan plan = parallel::make_parallel_plan(config, 16, 5);
  CHECK(plan.layout.tensor_model_parallel_size == 2);
  CHECK(plan.layout.pool_size() == 8);
  CHECK(plan.coordinates.tensor_parallel_index == 1);
  CHECK(plan.coordinates.pool_rank == 2);
  CHECK(plan.coordinates.data_parallel_index == 1);
  CHECK(plan.group(dist::GroupAxis::tensor_parallel).ranks() == std::vector<int>{4, 5});
  CHECK(plan.group(dist::GroupAxis::context_parallel).ranks() == std::vector<int>{5, 7});
  // ETP 1: EP groups are consecutive world ranks; rank 5 holds experts [4, 8).
  CHECK(plan.group(dist::GroupAxis::expert_parallel).ranks() == std::vector<int>{4, 5});
  CHECK(plan.experts.first == 4);
  // Per-group alignment under SP: 2c x tp; the pool's largest group of 8 pads to 32.
  CHECK(plan.alignment.multiple(2) == 8);
  CHECK(plan.alignment.multiple(1) == 2);
  CHECK(plan.largest_group_multiple() == 32);
  CHECK(parallel::summarize_parallel_plan(plan) ==
        "world 16 = tp 2 (sequence parallel) x dp 4 x cp 2, ep 2 (etp 1), dynamic CP, alignment "
        "per group (2 x group size x tp 2)");
  const std::string groups = parallel::describe_rank_groups(plan, 8);
  CHECK_THAT(groups, Contains("groups of rank 5 (tp index 1, pool rank 2, dp index 1"));
  CHECK_THAT(groups, Contains("tensor_parallel:          [4, 5]"));
  CHECK_THAT(groups, Contains("dynamic CP size 4:        [1, 3, 5, 7]"));

  const auto split = smoke_config(16, {"model.tensor_model_parallel_size=2"});
  const parallel::ParallelPlan split_plan = parallel::make_parallel_plan(split, 16, 5);
  CHECK(split_plan.layout.expert_tensor_parallel_size == 2);
  CHECK(split_plan.group(dist::GroupAxis::expert_parallel).ranks() == std::vector<int>{5, 7});
  CHECK_THAT(parallel::describe_rank_groups(split_plan, 8),
             Contains("FFN column shard 1 of 2 of each"));
}

TEST_CASE("parallel plan: pipeline stages, the layer split and a later stage's groups",
          "[train][plan]") {
  const auto piped = smoke_config(16, {"model.pipeline_model_parallel_size=2"});
  const parallel::ParallelPlan plan = parallel::make_parallel_plan(piped, 16, 13);
  CHECK(plan.layout.pipeline_model_parallel_size == 2);
  CHECK(plan.layout.pool_size() == 8);
  CHECK(plan.coordinates.pipeline_parallel_index == 1);
  CHECK(plan.coordinates.pool_rank == 5);
  // The same experts and CP position as pool rank 5 of stage 0.
  const parallel::ParallelPlan stage0 = parallel::make_parallel_plan(piped, 16, 5);
  CHECK(plan.experts.first == stage0.experts.first);
  CHECK(plan.group(dist::GroupAxis::context_parallel).ranks() == std::vector<int>{12, 13});
  REQUIRE(plan.pipeline.chunks.size() == 2);
  const std::int64_t layers = piped.model.architecture.num_hidden_layers;
  CHECK(plan.pipeline.chunk(1, 0).first_layer == layers / 2);
  CHECK_THAT(parallel::summarize_parallel_plan(plan), Contains("world 16 = pp 2 (vpp 1) x dp 4"));
  CHECK_THAT(parallel::describe_rank_groups(plan, piped.model.architecture.num_experts),
             Contains("[5, 13] (stage 1 of 2)"));
}
