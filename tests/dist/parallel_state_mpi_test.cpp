// ParallelState on real communicators: every group it builds holds exactly the ranks the
// pure layout functions name, dynamic groups are created once, in ascending order, and reused.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "dist/parallel_state.hpp"
#include "mpi_test_world.hpp"

using namespace dyncp::dist;
using dyncp::dist::testing::test_world;

namespace {

// The world ranks of `comm`'s members, in communicator order.
std::vector<int> world_ranks_of(Comm& comm) {
  const std::int32_t mine = test_world().rank();
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&mine, 1, ranks.data(), dyncp::core::DType::i32);
  return {ranks.begin(), ranks.end()};
}

// Every (tp, etp, cp, ep) with tp, cp and ep powers of two dividing the world, etp 1 or tp.
std::vector<ParallelLayout> layouts_for(int world_size, bool dynamic) {
  std::vector<ParallelLayout> layouts;
  const bool power_of_two = world_size >= 2 && (world_size & (world_size - 1)) == 0;
  if (dynamic && !power_of_two) return layouts;
  for (int tp = 1; tp <= world_size; tp *= 2) {
    if (world_size % tp != 0 || (dynamic && world_size / tp < 2)) continue;
    for (const int etp : {1, tp}) {
      for (int cp = 1; cp <= world_size / tp; cp *= 2) {
        for (int ep = 1; ep <= world_size; ep *= 2) {
          if ((world_size / tp) % cp != 0 || world_size % (ep * etp) != 0) continue;
          if (tp == 1 && (world_size % ep != 0)) continue;
          layouts.push_back(layout_for_world(world_size, cp, ep, dynamic, 1, {}, {tp, etp}));
        }
      }
      if (tp == 1) break;  // etp is 1 either way
    }
  }
  return layouts;
}

}  // namespace

TEST_CASE("parallel state: static groups hold exactly the layout's ranks", "[dist][mpi][state]") {
  Comm& world = test_world();
  for (const ParallelLayout& layout : layouts_for(world.size(), false)) {
    INFO("tp " << layout.tensor_model_parallel_size << " etp " << layout.expert_tensor_parallel_size
               << " dp " << layout.data_parallel_size << " cp " << layout.context_parallel_size
               << " ep " << layout.expert_model_parallel_size);
    ParallelState state(world, layout);
    for (const GroupAxis axis : all_group_axes) {
      INFO(group_axis_name(axis));
      const RankGroup expected = group_of(layout, axis, world.rank());
      REQUIRE(state.group(axis).size() == expected.size);
      REQUIRE(state.group(axis).rank() == expected.position_of(world.rank()));
      REQUIRE(world_ranks_of(state.group(axis)) == expected.ranks());
    }
    CHECK(state.dynamic_group_creations() == 0);
  }
}

TEST_CASE("parallel state: the wrong world size is a config error naming every factor",
          "[dist][mpi][state]") {
  Comm& world = test_world();
  ParallelLayout layout;
  layout.data_parallel_size = world.size() + 1;
  REQUIRE_THROWS_WITH(ParallelState(world, layout),
                      Catch::Contains("data_parallel_size (" + std::to_string(world.size() + 1) +
                                      ") x context_parallel_size (1)") &&
                          Catch::Contains("the job has " + std::to_string(world.size())));
}

TEST_CASE("parallel state: dynamic groups are created once, ascending, and match the layout",
          "[dist][mpi][state]") {
  Comm& world = test_world();
  for (const ParallelLayout& layout : layouts_for(world.size(), true)) {
    INFO("tp " << layout.tensor_model_parallel_size << " dp " << layout.data_parallel_size << " cp "
               << layout.context_parallel_size);
    ParallelState state(world, layout);
    const int pool = layout.pool_size();
    const int cp = layout.context_parallel_size;
    CHECK_FALSE(state.has_dynamic_group(1));
    REQUIRE_THROWS_WITH(state.dynamic_group(1), Catch::Contains("was not created"));

    // Asked for largest first: still created smallest first.
    const std::vector<int> request = {pool, 1, pool / 2 > 0 ? pool / 2 : 1};
    state.ensure_dynamic_groups(request);
    std::vector<int> expected_created;
    for (int size = 1; size <= pool; size *= 2) {
      const bool requested = size == 1 || size == pool || size == pool / 2;
      if (requested && size != cp && size != pool) expected_created.push_back(size);
    }
    CHECK(state.created_dynamic_sizes() == expected_created);
    for (const int size : request) {
      REQUIRE(state.has_dynamic_group(size));
      Comm& group = state.dynamic_group(size);
      REQUIRE(world_ranks_of(group) == dynamic_cp_group_of(layout, size, world.rank()).ranks());
    }

    // A second request for the same sizes creates nothing and returns the same groups.
    Comm* first = &state.dynamic_group(1);
    state.ensure_dynamic_groups(request);
    CHECK(state.created_dynamic_sizes() == expected_created);
    CHECK(&state.dynamic_group(1) == first);

    state.ensure_all_dynamic_groups();
    for (const int size : dynamic_cp_group_sizes(layout)) {
      REQUIRE(world_ranks_of(state.dynamic_group(size)) ==
              dynamic_cp_group_of(layout, size, world.rank()).ranks());
    }
    // A schedule's (start, size) resolves to the same group; a block without this rank or
    // an unaligned start is a scheduling bug.
    // Schedules name pool ranks (world rank / tp).
    const int pool_rank = state.coordinates().pool_rank;
    REQUIRE(pool_rank == world.rank() / layout.tensor_model_parallel_size);
    const int block_start = pool_rank - pool_rank % 2;
    if (pool >= 2) {
      CHECK(&state.dynamic_group_at(block_start, 2) == &state.dynamic_group(2));
      if (pool >= 4) {
        REQUIRE_THROWS_WITH(state.dynamic_group_at((block_start + 2) % pool, 2),
                            Catch::Contains("was scheduled into the group of 2 ranks"));
      }
      REQUIRE_THROWS_WITH(state.dynamic_group_at(1, pool), Catch::Contains("start at a multiple"));
    }
    // Sizes cp and pool reuse the static groups with the same ranks.
    CHECK(&state.dynamic_group(cp) == &state.context_parallel());
    if (pool != cp) CHECK(&state.dynamic_group(pool) == &state.pool());
    REQUIRE_THROWS_WITH(state.ensure_dynamic_groups(std::vector<int>{3}),
                        Catch::Contains("no dynamic CP group of size 3"));
  }
}

TEST_CASE(
    "parallel state: under TP every pool group holds one TP index and a TP group is "
    "consecutive ranks",
    "[dist][mpi][state]") {
  Comm& world = test_world();
  if (world.size() < 2 || world.size() % 2 != 0) return;
  ParallelState state(world, layout_for_world(world.size(), 1, 1, false, 1, {}, {2, 2}));
  const int first = world.rank() - world.rank() % 2;
  CHECK(world_ranks_of(state.tensor_parallel()) == std::vector<int>{first, first + 1});
  CHECK(world_ranks_of(state.expert_tensor_parallel()) == std::vector<int>{first, first + 1});
  for (const int member : world_ranks_of(state.pool())) CHECK(member % 2 == world.rank() % 2);
  CHECK(state.pool().size() == world.size() / 2);
  // A sum over the TP group of its members' ranks: the pair's ranks add up.
  std::vector<float> value(1, static_cast<float>(world.rank()));
  state.tensor_parallel().all_reduce(std::span<float>(value), ReduceOp::sum);
  CHECK(value[0] == static_cast<float>(2 * first + 1));
  REQUIRE_THROWS_WITH(
      ParallelState(world, layout_for_world(world.size() * 2, 1, 1, false, 1, {}, {2, 1})),
      Catch::Contains("tensor_model_parallel_size (2) x data_parallel_size"));
}

TEST_CASE("parallel state: ranks asking for different dynamic sizes get an error, not a hang",
          "[dist][mpi][state]") {
  Comm& world = test_world();
  if (world.size() < 2) return;
  const int pool = world.size();
  if ((pool & (pool - 1)) != 0) return;
  ParallelState state(world, layout_for_world(pool, 1, 1, true, 1));
  const std::vector<int> mine = {world.rank() == 0 ? 1 : pool};
  REQUIRE_THROWS_WITH(state.ensure_dynamic_groups(mine),
                      Catch::Contains("ranks asked for different dynamic CP group sizes"));
  CHECK(state.dynamic_group_creations() == 0);
}

TEST_CASE("parallel state: total counters sum every communicator once", "[dist][mpi][state]") {
  Comm& world = test_world();
  ParallelState state(world, layout_for_world(world.size(), 1, 1, false, 1));
  const CommCounters before = state.total_counters();
  std::vector<float> gradient(64, 1.0f);
  state.data_parallel().all_reduce(std::span<float>(gradient), ReduceOp::sum);
  state.pool().barrier();
  const CommCounters moved = counters_difference(state.total_counters(), before);
  const auto p = static_cast<std::uint64_t>(world.size());
  CHECK(moved.total().calls == 2);
  CHECK(moved[CommOp::all_reduce].bytes_sent == 2 * 256 * (p - 1) / p);
  REQUIRE(gradient == std::vector<float>(64, static_cast<float>(world.size())));
  CHECK_THAT(state.format_counters(), Catch::Contains("dp"));
}

TEST_CASE("parallel state: the pipeline group joins one stage position across the stages",
          "[dist][mpi][state]") {
  Comm& world = test_world();
  for (const int stages : {2, 4}) {
    if (world.size() % stages != 0) continue;
    INFO("pp " << stages);
    const ParallelLayout layout =
        layout_for_world(world.size(), 1, 1, false, 1, {stages, 1}, {1, 1});
    ParallelState state(world, layout);
    const RankGroup expected = pipeline_group_of(layout, world.rank());
    CHECK(world_ranks_of(state.pipeline()) == expected.ranks());
    CHECK(state.pipeline().rank() == state.coordinates().pipeline_parallel_index);
    // The embedding group: the first and last stages' ranks at this position only.
    const int stage = state.coordinates().pipeline_parallel_index;
    const int stage_size = layout.stage_size();
    if (stage == 0 || stage == stages - 1) {
      REQUIRE(state.embedding_group() != nullptr);
      const int position = world.rank() % stage_size;
      CHECK(world_ranks_of(*state.embedding_group()) ==
            std::vector<int>{position, position + (stages - 1) * stage_size});
    } else {
      CHECK(state.embedding_group() == nullptr);
    }
    // Every static group stays inside the stage.
    for (const int member : world_ranks_of(state.pool())) CHECK(member / stage_size == stage);
  }
  // Without stages the pipeline group is this rank alone and there is no embedding group.
  ParallelState flat(world, layout_for_world(world.size(), 1, 1, false, 1));
  CHECK(flat.pipeline().size() == 1);
  CHECK(flat.embedding_group() == nullptr);
}

TEST_CASE("comm: a one-sided exchange sends or receives alone", "[dist][mpi][comm]") {
  Comm& world = test_world();
  if (world.size() < 2) return;
  const int me = world.rank();
  const int next = (me + 1) % world.size();
  const int previous = (me + world.size() - 1) % world.size();
  // Even ranks send to the next rank only, odd ranks receive from the previous only: one
  // direction at a time, as pipeline stages pass activations.
  std::vector<float> data(300, static_cast<float>(me));
  std::vector<float> incoming(300, -1.0f);
  if (world.size() % 2 == 0) {
    Comm::PendingSendRecv pending =
        me % 2 == 0 ? world.start_send_recv(data.data(), data.size(), next, nullptr, 0, me,
                                            dyncp::core::DType::f32, 3)
                    : world.start_send_recv(nullptr, 0, me, incoming.data(), incoming.size(),
                                            previous, dyncp::core::DType::f32, 3);
    world.wait(pending);
    if (me % 2 == 1) CHECK(incoming == std::vector<float>(300, static_cast<float>(previous)));
  }
  world.barrier();
}
