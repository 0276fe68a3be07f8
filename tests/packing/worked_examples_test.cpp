// The worked examples of the Megatron dynamic-CP reference (§3.6), as exact expectations.
#include <catch2/catch.hpp>

#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"

using namespace dyncp::packing;
using Lists = std::vector<std::vector<std::vector<std::int64_t>>>;

namespace {

Lists dynamic(std::vector<std::int64_t> lengths, std::int64_t dp, std::int64_t cp, std::int64_t cap,
              std::int64_t min_cp = 1) {
  SchedulerInput input{lengths, dp, cp, cap, min_cp};
  const Schedule schedule = schedule_default_dynamic_cp(input);
  REQUIRE(check_schedule(schedule, lengths, cap, {0, min_cp}) == "");
  return schedule.rank_lists();
}

Lists static_cp(std::vector<std::int64_t> lengths, std::int64_t dp, std::int64_t cp,
                std::int64_t cap) {
  SchedulerInput input{lengths, dp, cp, cap};
  const Schedule schedule = schedule_dp_balanced(input);
  REQUIRE(check_schedule(schedule, lengths, cap, {cp, 1}) == "");
  return schedule.rank_lists();
}

}  // namespace

TEST_CASE("dynamic CP: eight samples on four ranks, cap 64", "[packing]") {
  const Lists expected = {{{0}, {0}, {1, 4}, {1, 4}}, {{2}, {2}, {3, 6}, {5, 7}}};
  CHECK(dynamic({128, 96, 64, 48, 32, 24, 16, 8}, 2, 2, 64) == expected);
}

TEST_CASE("dynamic CP: a short sequence joins the long one's CP2 group", "[packing]") {
  CHECK(dynamic({6144, 2048}, 1, 2, 4096) == Lists{{{0, 1}, {0, 1}}});
}

TEST_CASE("dynamic CP: a pool of 14 falls back to the full pool", "[packing]") {
  CHECK(dynamic({50, 50}, 7, 2, 100) == Lists{Lists::value_type(14, {0, 1})});
}

TEST_CASE("dynamic CP: eight ranks, cap 2048, mixed sizes", "[packing]") {
  const Lists expected = {{{0}, {0}, {0}, {0}, {1}, {1}, {2}, {3}},
                          {{4}, {4}, {4}, {4}, {5, 6, 7}, {5, 6, 7}, {5, 6, 7}, {5, 6, 7}}};
  CHECK(dynamic({8192, 4096, 2048, 2048, 1024, 512, 512, 256}, 4, 2, 2048) == expected);
}

TEST_CASE("dynamic CP: a lone last sample is expanded to the whole pool", "[packing]") {
  const Lists expected = {{{0}, {1}, {2}, {3}}, {{4}, {4}, {4}, {4}}};
  CHECK(dynamic({100, 100, 100, 100, 100}, 4, 1, 100) == expected);
}

TEST_CASE("dynamic CP: shorter sequences are promoted to CP2 to cut the critical path",
          "[packing]") {
  const Lists expected = {{{0}, {0}, {1}, {1}, {2}, {2}, {3}, {4}}};
  CHECK(dynamic({101, 100, 72, 71, 71}, 8, 1, 100) == expected);
}

TEST_CASE("dp_balanced: next-fit bins go to DP replicas in order", "[packing]") {
  const Lists expected = {{{0}, {0}, {1}, {1}}, {{2, 3}, {2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7}}};
  CHECK(static_cp({128, 96, 64, 48, 32, 24, 16, 8}, 2, 2, 64) == expected);
}

TEST_CASE("dp_balanced: the last bin is split to reach a multiple of dp", "[packing]") {
  const Lists expected = {{{0}, {1, 2}}, {{3}, {4}}};
  CHECK(static_cp({100, 20, 30, 90, 10}, 2, 1, 100) == expected);
}
