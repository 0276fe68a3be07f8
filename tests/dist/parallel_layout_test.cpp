#include "dist/parallel_layout.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "core/error.hpp"

using namespace dyncp::dist;

namespace {

ParallelLayout make(int dp, int cp, int ep, bool dynamic = false, int min_size = 1, int tp = 1,
                    int etp = 1) {
  ParallelLayout layout;
  layout.tensor_model_parallel_size = tp;
  layout.expert_tensor_parallel_size = etp;
  layout.data_parallel_size = dp;
  layout.context_parallel_size = cp;
  layout.expert_model_parallel_size = ep;
  layout.dynamic_context_parallel = dynamic;
  layout.min_dynamic_context_parallel_size = min_size;
  return layout;
}

// Every rank lands in exactly one group of the axis, at a distinct (index, position), and
// the group it lands in is the one every member of that group reports.
void check_axis_partitions_pool(const ParallelLayout& layout, GroupAxis axis, int expected_size) {
  const int pool = layout.world_size();
  const int groups = num_groups(layout, axis);
  REQUIRE(groups * expected_size == pool);
  std::vector<char> taken(static_cast<std::size_t>(pool), 0);
  for (int rank = 0; rank < pool; ++rank) {
    const RankGroup group = group_of(layout, axis, rank);
    REQUIRE(group.size == expected_size);
    REQUIRE(group.index >= 0);
    REQUIRE(group.index < groups);
    const int position = group.position_of(rank);
    REQUIRE(position >= 0);
    REQUIRE(group.rank_at(position) == rank);
    auto& slot = taken[static_cast<std::size_t>(group.index * expected_size + position)];
    REQUIRE(slot == 0);
    slot = 1;
    REQUIRE(group_of(layout, axis, group.rank_at(0)) == group);
    REQUIRE(group_of(layout, axis, group.rank_at(group.size - 1)) == group);
  }
}

}  // namespace

TEST_CASE("layout: the worked example of the header holds for rank 5 of dp 4 x cp 2, ep 4",
          "[dist][layout]") {
  const ParallelLayout layout = make(4, 2, 4, true);
  const RankCoordinates where = coordinates_of(layout, 5);
  CHECK(where.data_parallel_index == 2);
  CHECK(where.context_parallel_index == 1);
  CHECK(group_of(layout, GroupAxis::context_parallel, 5).ranks() == std::vector<int>{4, 5});
  CHECK(group_of(layout, GroupAxis::data_parallel, 5).ranks() == std::vector<int>{1, 3, 5, 7});
  CHECK(group_of(layout, GroupAxis::expert_parallel, 5).ranks() == std::vector<int>{4, 5, 6, 7});
  CHECK(group_of(layout, GroupAxis::expert_data_parallel, 5).ranks() == std::vector<int>{1, 5});
  CHECK(dynamic_cp_group_of(layout, 1, 5).ranks() == std::vector<int>{5});
  CHECK(dynamic_cp_group_of(layout, 2, 5).ranks() == std::vector<int>{4, 5});
  CHECK(dynamic_cp_group_of(layout, 4, 5).ranks() == std::vector<int>{4, 5, 6, 7});
  CHECK(dynamic_cp_group_of(layout, 8, 5) == group_of(layout, GroupAxis::pool, 5));
}

TEST_CASE("layout: every axis partitions pools of up to 4096 ranks, CP fastest", "[dist][layout]") {
  const int cp = GENERATE(1, 2, 4, 8, 32);
  const int dp = GENERATE(1, 2, 3, 16, 128);
  const int pool = dp * cp;
  for (const int ep : {1, 2, 4, 8, 64}) {
    if (pool % ep != 0) continue;
    const ParallelLayout layout = make(dp, cp, ep);
    REQUIRE(layout_problems(layout).empty());
    check_axis_partitions_pool(layout, GroupAxis::context_parallel, cp);
    check_axis_partitions_pool(layout, GroupAxis::data_parallel, dp);
    check_axis_partitions_pool(layout, GroupAxis::pool, pool);
    check_axis_partitions_pool(layout, GroupAxis::expert_parallel, ep);
    check_axis_partitions_pool(layout, GroupAxis::expert_data_parallel, pool / ep);
    for (int rank = 0; rank < pool; ++rank) {
      const RankCoordinates where = coordinates_of(layout, rank);
      REQUIRE(rank == where.data_parallel_index * cp + where.context_parallel_index);
      // CP groups are consecutive ranks; DP groups share the CP index.
      REQUIRE(group_of(layout, GroupAxis::context_parallel, rank).stride == 1);
      for (const int member : group_of(layout, GroupAxis::data_parallel, rank).ranks()) {
        REQUIRE(coordinates_of(layout, member).context_parallel_index ==
                where.context_parallel_index);
      }
      // Same EP index: first and last members suffice (the group is a progression of stride ep).
      const RankGroup expert_dp = group_of(layout, GroupAxis::expert_data_parallel, rank);
      REQUIRE(expert_dp.stride == ep);
      REQUIRE(expert_dp.rank_at(0) % ep == rank % ep);
      REQUIRE(expert_dp.rank_at(expert_dp.size - 1) % ep == rank % ep);
    }
  }
}

TEST_CASE("layout: dynamic CP groups are the aligned power-of-two blocks, nested, up to 4096",
          "[dist][layout]") {
  const int cp = GENERATE(1, 2, 8);
  const int pool = GENERATE(2, 8, 64, 4096);
  if (pool % cp != 0) return;
  const int min_size = GENERATE(1, 2);
  const ParallelLayout layout = make(pool / cp, cp, 1, true, min_size);
  REQUIRE(layout_problems(layout).empty());
  const std::vector<int> sizes = dynamic_cp_group_sizes(layout);
  REQUIRE(sizes.front() == min_size);
  REQUIRE(sizes.back() == pool);
  for (std::size_t i = 1; i < sizes.size(); ++i) REQUIRE(sizes[i] == 2 * sizes[i - 1]);
  for (const int size : sizes) {
    for (int rank = 0; rank < pool; ++rank) {
      const RankGroup group = dynamic_cp_group_of(layout, size, rank);
      REQUIRE(group.first_rank == rank - rank % size);
      REQUIRE(group.first_rank % size == 0);
      REQUIRE(group.size == size);
      REQUIRE(group.stride == 1);
      REQUIRE(group.index == rank / size);
      REQUIRE(group.position_of(rank) == rank % size);
      if (size * 2 <= pool) {
        const RankGroup parent = dynamic_cp_group_of(layout, size * 2, rank);
        REQUIRE(parent.contains(group.rank_at(0)));
        REQUIRE(parent.contains(group.rank_at(size - 1)));
      }
      if (size == cp) REQUIRE(group == group_of(layout, GroupAxis::context_parallel, rank));
      if (size <= cp) {
        // Inside one DP replica's CP group.
        REQUIRE(group_of(layout, GroupAxis::context_parallel, rank).contains(group.rank_at(0)));
      }
    }
  }
  CHECK_FALSE(is_dynamic_cp_group_size(layout, 3));
  CHECK_FALSE(is_dynamic_cp_group_size(layout, 2 * pool));
  CHECK(is_dynamic_cp_group_size(layout, min_size * 2 <= pool ? min_size * 2 : min_size));
  if (min_size == 2) {
    CHECK_FALSE(is_dynamic_cp_group_size(layout, 1));
    REQUIRE_THROWS_WITH(dynamic_cp_group_of(layout, 1, 0),
                        Catch::Contains("no dynamic CP group of size 1"));
  }
}

TEST_CASE("layout: without dynamic CP there are no dynamic groups", "[dist][layout]") {
  const ParallelLayout layout = make(2, 2, 1, false);
  CHECK(dynamic_cp_group_sizes(layout).empty());
  REQUIRE_THROWS_WITH(dynamic_cp_group_of(layout, 2, 0),
                      Catch::Contains("dynamic_context_parallel is false"));
}

TEST_CASE("layout: validation reports every problem with its key path at once", "[dist][layout]") {
  const ParallelLayout layout = make(3, 2, 4, true, 3);  // pool 6
  const auto problems = layout_problems(layout);
  REQUIRE(problems.size() == 3);
  try {
    validate_layout(layout);
    FAIL("validate_layout accepted an invalid layout");
  } catch (const dyncp::core::Error& error) {
    CHECK(error.exit_code() == 2);
    const std::string text = error.what();
    CHECK_THAT(text, Catch::Contains("3 problems"));
    CHECK_THAT(text, Catch::Contains("model.expert_model_parallel_size: 4: must divide the pool "
                                     "of data_parallel_size (3) x context_parallel_size (2) = 6"));
    CHECK_THAT(text, Catch::Contains("model.dynamic_context_parallel: true"));
    CHECK_THAT(text, Catch::Contains("model.min_dynamic_context_parallel_size: 3"));
  }
  REQUIRE_THROWS_WITH(validate_layout(make(1, 0, 1)),
                      Catch::Contains("model.context_parallel_size: 0: must be >= 1"));
  REQUIRE_THROWS_WITH(validate_layout(make(2, 2, 1, true, 8)),
                      Catch::Contains("must be a power of two in [1, 4]"));
}

TEST_CASE("layout: the world size determines data_parallel_size", "[dist][layout]") {
  const ParallelLayout layout = layout_for_world(8, 2, 2, true, 1);
  CHECK(layout.data_parallel_size == 4);
  CHECK(layout.pool_size() == 8);
  REQUIRE_THROWS_WITH(layout_for_world(6, 4, 1, false, 1),
                      Catch::Contains("model.context_parallel_size") &&
                          Catch::Contains("divide the world of 6 ranks"));
  REQUIRE_THROWS_WITH(layout_for_world(6, 2, 1, true, 1),
                      Catch::Contains("power of two and at least 2"));
}

TEST_CASE("layout: ranks outside the pool are rejected", "[dist][layout]") {
  const ParallelLayout layout = make(2, 2, 1);
  REQUIRE_THROWS_WITH(coordinates_of(layout, 4),
                      Catch::Contains("rank 4 is outside the pool of 4"));
  REQUIRE_THROWS_WITH(group_of(layout, GroupAxis::pool, -1), Catch::Contains("rank -1"));
}

TEST_CASE("layout: the dry-run text lists the factors and every axis's groups", "[dist][layout]") {
  const std::string text = format_layout(make(4, 2, 4, true), 8);
  CHECK_THAT(text, Catch::Contains("world 8 = data_parallel 4 x context_parallel 2"));
  CHECK_THAT(text, Catch::Contains("context_parallel (4 groups): [0, 1] [2, 3] [4, 5] [6, 7]"));
  CHECK_THAT(text, Catch::Contains("data_parallel (2 groups): [0, 2, 4, 6] [1, 3, 5, 7]"));
  CHECK_THAT(text, Catch::Contains("expert_parallel (2 groups): [0, 1, 2, 3] [4, 5, 6, 7]"));
  CHECK_THAT(text, Catch::Contains("expert_data_parallel (4 groups): [0, 4] [1, 5] [2, 6] [3, 7]"));
  CHECK_THAT(text, Catch::Contains("dynamic CP: sizes 1, 2, 4, 8"));
  CHECK_THAT(text, Catch::Contains("dynamic CP size 4 (2 groups): [0, 1, 2, 3] [4, 5, 6, 7]"));

  const std::string large = format_layout(make(512, 8, 1, true, 2), 2);
  CHECK_THAT(large, Catch::Contains("data_parallel (8 groups): [0, 8, 16, ..., 4088] (512 ranks)"));
  CHECK_THAT(large, Catch::Contains("... (510 more)"));
  CHECK_THAT(format_layout(make(2, 1, 1)), Catch::Contains("dynamic CP: off"));
}

TEST_CASE("layout: the TP worked example of the header holds for rank 5 of tp 2 x cp 2 x dp 2",
          "[dist][layout][tp]") {
  const ParallelLayout layout = make(2, 2, 2, true, 1, 2, 1);
  REQUIRE(layout_problems(layout).empty());
  REQUIRE(layout.world_size() == 8);
  const RankCoordinates where = coordinates_of(layout, 5);
  CHECK(where.tensor_parallel_index == 1);
  CHECK(where.pool_rank == 2);
  CHECK(where.data_parallel_index == 1);
  CHECK(where.context_parallel_index == 0);
  const auto ranks = [&](GroupAxis axis) { return group_of(layout, axis, 5).ranks(); };
  CHECK(ranks(GroupAxis::tensor_parallel) == std::vector<int>{4, 5});
  CHECK(ranks(GroupAxis::context_parallel) == std::vector<int>{5, 7});
  CHECK(ranks(GroupAxis::data_parallel) == std::vector<int>{1, 5});
  CHECK(ranks(GroupAxis::pool) == std::vector<int>{1, 3, 5, 7});
  CHECK(ranks(GroupAxis::expert_parallel) == std::vector<int>{4, 5});
  CHECK(ranks(GroupAxis::expert_data_parallel) == std::vector<int>{1, 3, 5, 7});
  CHECK(ranks(GroupAxis::expert_tensor_parallel) == std::vector<int>{5});
  CHECK(dynamic_cp_group_of(layout, 1, 5).ranks() == std::vector<int>{5});
  CHECK(dynamic_cp_group_of(layout, 2, 5).ranks() == std::vector<int>{5, 7});
  CHECK(dynamic_cp_group_of(layout, 4, 5) == group_of(layout, GroupAxis::pool, 5));

  const ParallelLayout split_experts = make(2, 2, 2, true, 1, 2, 2);
  REQUIRE(layout_problems(split_experts).empty());
  const auto split = [&](GroupAxis axis) { return group_of(split_experts, axis, 5).ranks(); };
  CHECK(split(GroupAxis::expert_tensor_parallel) == std::vector<int>{4, 5});
  CHECK(split(GroupAxis::expert_parallel) == std::vector<int>{5, 7});
  CHECK(split(GroupAxis::expert_data_parallel) == std::vector<int>{1, 5});
  // Rank 5 is first in its EP group [5, 7], rank 7 second.
  CHECK(coordinates_of(split_experts, 5).expert_parallel_index == 0);
  CHECK(coordinates_of(split_experts, 7).expert_parallel_index == 1);
  CHECK(coordinates_of(split_experts, 5).expert_tensor_parallel_index == 1);
}

TEST_CASE("layout: under TP every axis partitions the world, TP fastest, pools per TP rank",
          "[dist][layout][tp]") {
  const int tp = GENERATE(2, 4, 8);
  const int cp = GENERATE(1, 2, 4);
  const int dp = GENERATE(1, 2, 3, 16);
  for (const int etp : {1, tp}) {
    for (const int ep : {1, 2, 4, 8}) {
      const ParallelLayout layout = make(dp, cp, ep, false, 1, tp, etp);
      const int world = layout.world_size();
      if (world % (etp * ep) != 0) {
        CHECK_FALSE(layout_problems(layout).empty());
        continue;
      }
      INFO("tp " << tp << " etp " << etp << " dp " << dp << " cp " << cp << " ep " << ep);
      REQUIRE(layout_problems(layout).empty());
      check_axis_partitions_pool(layout, GroupAxis::tensor_parallel, tp);
      check_axis_partitions_pool(layout, GroupAxis::context_parallel, cp);
      check_axis_partitions_pool(layout, GroupAxis::data_parallel, dp);
      check_axis_partitions_pool(layout, GroupAxis::pool, dp * cp);
      check_axis_partitions_pool(layout, GroupAxis::expert_tensor_parallel, etp);
      check_axis_partitions_pool(layout, GroupAxis::expert_parallel, ep);
      check_axis_partitions_pool(layout, GroupAxis::expert_data_parallel, world / (etp * ep));
      for (int rank = 0; rank < world; ++rank) {
        const RankCoordinates where = coordinates_of(layout, rank);
        // Megatron's order tp-cp-dp.
        REQUIRE(rank == (where.data_parallel_index * cp + where.context_parallel_index) * tp +
                            where.tensor_parallel_index);
        REQUIRE(group_of(layout, GroupAxis::tensor_parallel, rank).stride == 1);
        // Every pool-derived group keeps the TP index and names pool ranks in order.
        for (const GroupAxis axis :
             {GroupAxis::context_parallel, GroupAxis::data_parallel, GroupAxis::pool}) {
          for (const int member : group_of(layout, axis, rank).ranks()) {
            REQUIRE(member % tp == where.tensor_parallel_index);
          }
        }
        // Experts: etp 1 groups ep consecutive ranks; etp = tp keeps the TP index.
        const RankGroup experts = group_of(layout, GroupAxis::expert_parallel, rank);
        REQUIRE(experts.stride == etp);
        if (etp == tp) {
          for (const int member : experts.ranks()) {
            REQUIRE(coordinates_of(layout, member).tensor_parallel_index ==
                    where.tensor_parallel_index);
          }
        }
      }
    }
  }
}

TEST_CASE("layout: under TP dynamic CP groups are aligned blocks of one TP rank's pool",
          "[dist][layout][tp]") {
  const int tp = GENERATE(2, 4);
  const int pool = GENERATE(2, 8, 64);
  const ParallelLayout layout = make(pool / 2, 2, 1, true, 1, tp);
  REQUIRE(layout_problems(layout).empty());
  for (const int size : dynamic_cp_group_sizes(layout)) {
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      const RankGroup group = dynamic_cp_group_of(layout, size, rank);
      const int pool_rank = rank / tp;
      REQUIRE(group.size == size);
      REQUIRE(group.stride == tp);
      REQUIRE(group.first_rank == (pool_rank - pool_rank % size) * tp + rank % tp);
      REQUIRE(group.position_of(rank) == pool_rank % size);
      if (size == 2) REQUIRE(group == group_of(layout, GroupAxis::context_parallel, rank));
      if (size == pool) REQUIRE(group == group_of(layout, GroupAxis::pool, rank));
    }
  }
}

TEST_CASE("layout: TP sizes that cannot work are refused naming the key and the fix",
          "[dist][layout][tp]") {
  REQUIRE_THROWS_WITH(validate_layout(make(2, 2, 1, false, 1, 4, 2)),
                      Catch::Contains("model.expert_tensor_parallel_size: 2: must be 1") &&
                          Catch::Contains("tensor_model_parallel_size (4)"));
  REQUIRE_THROWS_WITH(validate_layout(make(1, 1, 4, false, 1, 2, 2)),
                      Catch::Contains("model.expert_model_parallel_size: 4: "
                                      "expert_tensor_parallel_size (2) x 4 must divide the 2 "
                                      "ranks of a pipeline stage"));
  REQUIRE_THROWS_WITH(layout_for_world(6, 1, 1, false, 1, {}, {4, 1}),
                      Catch::Contains("model.tensor_model_parallel_size: 4: must be >= 1 and "
                                      "divide the 6 ranks of a pipeline stage"));
  REQUIRE_THROWS_WITH(layout_for_world(8, 3, 1, false, 1, {}, {2, 1}),
                      Catch::Contains("model.context_parallel_size: 3: must be >= 1 and divide "
                                      "world 8 / (pipeline_model_parallel_size 1 x "
                                      "tensor_model_parallel_size 2) = 4"));
  const ParallelLayout layout = layout_for_world(16, 2, 4, true, 1, {}, {2, 1});
  CHECK(layout.data_parallel_size == 4);
  CHECK(layout.pool_size() == 8);
  CHECK(layout.world_size() == 16);
  REQUIRE_THROWS_WITH(
      coordinates_of(layout, 16),
      Catch::Contains("rank 16 is outside the world of 16 ranks (dp 4 x cp 2 x tp 2)"));
}

TEST_CASE("layout: the dry-run text under TP lists the TP and expert-TP groups",
          "[dist][layout][tp]") {
  const std::string text = format_layout(make(2, 2, 2, true, 1, 2, 1), 8);
  CHECK_THAT(text, Catch::Contains("world 8 = pipeline 1 x data_parallel 2 x context_parallel 2 "
                                   "x tensor_parallel 2"));
  CHECK_THAT(text, Catch::Contains("tensor_parallel (4 groups): [0, 1] [2, 3] [4, 5] [6, 7]"));
  CHECK_THAT(text, Catch::Contains("context_parallel (4 groups): [0, 2] [1, 3] [4, 6] [5, 7]"));
  CHECK_THAT(text, Catch::Contains("pool (2 groups): [0, 2, 4, 6] [1, 3, 5, 7]"));
  CHECK_THAT(text, Catch::Contains("expert_parallel (4 groups): [0, 1] [2, 3] [4, 5] [6, 7]"));
  CHECK_THAT(text, Catch::Contains("dynamic CP size 2 (4 groups): [0, 2] [1, 3] [4, 6] [5, 7]"));
  // Without TP the TP axes are not listed.
  CHECK_THAT(format_layout(make(2, 1, 1)), !Catch::Contains("tensor_parallel"));
}

TEST_CASE("layout: pipeline stages are the slowest dimension, each with its own pool",
          "[dist][layout]") {
  // world 16 = pp 2 x dp 4 x cp 2, ep 2, dynamic CP: rank 13 = stage 1, pool rank 5.
  const ParallelLayout layout = layout_for_world(16, 2, 2, true, 1, {2, 1});
  CHECK(layout.pipeline_model_parallel_size == 2);
  CHECK(layout.data_parallel_size == 4);
  CHECK(layout.world_size() == 16);
  const RankCoordinates at = coordinates_of(layout, 13);
  CHECK(at.pipeline_parallel_index == 1);
  CHECK(at.pool_rank == 5);
  CHECK(at.data_parallel_index == 2);
  CHECK(at.context_parallel_index == 1);
  // Stage 1's groups are stage 0's moved by one pool (8 ranks), with distinct colors.
  CHECK(group_of(layout, GroupAxis::context_parallel, 13).ranks() == std::vector<int>{12, 13});
  CHECK(group_of(layout, GroupAxis::data_parallel, 13).ranks() == std::vector<int>{9, 11, 13, 15});
  CHECK(group_of(layout, GroupAxis::pool, 13).ranks() ==
        std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(group_of(layout, GroupAxis::expert_parallel, 13).ranks() == std::vector<int>{12, 13});
  CHECK(group_of(layout, GroupAxis::data_parallel, 13).index !=
        group_of(layout, GroupAxis::data_parallel, 5).index);
  CHECK(dynamic_cp_group_of(layout, 4, 13).ranks() == std::vector<int>{12, 13, 14, 15});
  CHECK(dynamic_cp_group_of(layout, 8, 13) == group_of(layout, GroupAxis::pool, 13));
  // The pipeline group joins the same pool position across the stages.
  CHECK(pipeline_group_of(layout, 13).ranks() == std::vector<int>{5, 13});
  CHECK(pipeline_group_of(layout, 5) == pipeline_group_of(layout, 13));
  // Every world rank is in exactly one pipeline group, at its stage's position.
  for (int rank = 0; rank < 16; ++rank) {
    const RankGroup group = pipeline_group_of(layout, rank);
    CHECK(group.position_of(rank) == rank / 8);
  }
  CHECK_THROWS(coordinates_of(layout, 16));
  CHECK_THROWS_WITH(layout_for_world(16, 2, 2, true, 1, {3, 1}),
                    Catch::Contains("model.pipeline_model_parallel_size") &&
                        Catch::Contains("divide the world of 16"));
  CHECK_THROWS_WITH(layout_for_world(4, 1, 1, false, 1, {1, 2}),
                    Catch::Contains("model.virtual_pipeline_model_parallel_size: 2"));
  CHECK_THAT(format_layout(layout), Catch::Contains("world 16 = pipeline 2 x data_parallel 4 x "
                                                    "context_parallel 2"));
}

TEST_CASE("layout: pp 2 x dp 2 x tp 2 nests a TP-fastest stage inside each pipeline stage",
          "[dist][layout][tp]") {
  // world 8 = pp 2 x dp 2 x cp 1 x tp 2: stage s holds ranks 4s..4s+3; rank 6 = stage 1,
  // pool rank 1, tp index 0.
  const ParallelLayout layout = layout_for_world(8, 1, 1, false, 1, {2, 1}, {2, 1});
  REQUIRE(layout.data_parallel_size == 2);
  REQUIRE(layout.stage_size() == 4);
  const RankCoordinates at = coordinates_of(layout, 6);
  CHECK(at.pipeline_parallel_index == 1);
  CHECK(at.pool_rank == 1);
  CHECK(at.tensor_parallel_index == 0);
  CHECK(at.data_parallel_index == 1);
  CHECK(pipeline_group_of(layout, 6).ranks() == std::vector<int>{2, 6});
  CHECK(pipeline_group_of(layout, 1).ranks() == std::vector<int>{1, 5});
  CHECK(group_of(layout, GroupAxis::tensor_parallel, 6).ranks() == std::vector<int>{6, 7});
  CHECK(group_of(layout, GroupAxis::pool, 6).ranks() == std::vector<int>{4, 6});
  CHECK(group_of(layout, GroupAxis::data_parallel, 7).ranks() == std::vector<int>{5, 7});
  CHECK(group_of(layout, GroupAxis::pool, 1).ranks() == std::vector<int>{1, 3});
  CHECK(group_of(layout, GroupAxis::tensor_parallel, 1).ranks() == std::vector<int>{0, 1});
  // Colors are distinct across stages (each stage's groups are its own communicators).
  CHECK(group_of(layout, GroupAxis::tensor_parallel, 6).index ==
        group_of(layout, GroupAxis::tensor_parallel, 2).index +
            num_groups(layout, GroupAxis::tensor_parallel));
  // Every axis partitions the world: each rank in exactly one group, at distinct colors.
  for (const GroupAxis axis : all_group_axes) {
    std::vector<int> seen(8, 0);
    for (int rank = 0; rank < 8; ++rank) {
      const RankGroup group = group_of(layout, axis, rank);
      REQUIRE(group.contains(rank));
      for (const int member : group.ranks()) REQUIRE(group_of(layout, axis, member) == group);
      REQUIRE(group.rank_at(group.size - 1) / 4 == rank / 4);  // inside one stage
      ++seen[static_cast<std::size_t>(rank)];
    }
    for (const int count : seen) REQUIRE(count == 1);
  }
  const std::string text = format_layout(layout, 8);
  CHECK_THAT(text, Catch::Contains("world 8 = pipeline 2 x data_parallel 2 x context_parallel 1 x "
                                   "tensor_parallel 2"));
  CHECK_THAT(text, Catch::Contains("pipeline_parallel (4 groups): [0, 4]"));
  CHECK_THAT(text, Catch::Contains("tensor_parallel (2 groups): [0, 1] [2, 3]"));
  CHECK_THAT(text, Catch::Contains("pool (2 groups): [0, 2] [1, 3]"));
  REQUIRE_THROWS_WITH(layout_for_world(8, 1, 1, false, 1, {2, 1}, {3, 1}),
                      Catch::Contains("model.tensor_model_parallel_size: 3"));
}
