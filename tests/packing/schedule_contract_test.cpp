// check_schedule rejects each broken clause of the Schedule contract and names it.
#include <catch2/catch.hpp>

#include "packing/schedule.hpp"

using namespace dyncp::packing;
using Lists = std::vector<std::vector<std::vector<std::int64_t>>>;

namespace {
std::string check(const Lists& lists, std::int64_t pool, std::vector<std::int64_t> lengths,
                  std::int64_t cap, ScheduleCheckOptions options = {}) {
  return check_schedule(schedule_from_rank_lists(lists, pool), lengths, cap, options);
}
}  // namespace

TEST_CASE("a valid schedule passes and round-trips through rank lists", "[packing]") {
  const Lists lists = {{{0}, {0}, {1, 4}, {1, 4}}, {{2}, {2}, {3, 6}, {5, 7}}};
  const Schedule schedule = schedule_from_rank_lists(lists, 4);
  CHECK(schedule.rank_lists() == lists);
  CHECK(schedule.group_of(1, 3).start_rank == 3);
  CHECK(schedule.group_of(1, 1).size == 2);
  CHECK(check_schedule(schedule, {{128, 96, 64, 48, 32, 24, 16, 8}}, 64) == "");
}

TEST_CASE("each contract clause is checked", "[packing]") {
  const std::vector<std::int64_t> lengths = {10, 10, 10, 10};
  CHECK_THAT(check({{{0, 1, 2, 3}, {}}}, 2, lengths, 100), Catch::Contains("idle"));
  CHECK_THAT(check({{{0}, {1}, {1}, {2, 3}}}, 4, lengths, 100),
             Catch::Contains("aligned power-of-two"));
  CHECK_THAT(check({{{0}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}}}, 4, lengths, 100),
             Catch::Contains("aligned power-of-two"));
  CHECK_THAT(check({{{0, 1}, {2, 3}}}, 2, lengths, 15), Catch::Contains("above size x cap"));
  CHECK_THAT(check({{{0, 1}, {1, 2, 3}}}, 2, lengths, 100), Catch::Contains("already scheduled"));
  CHECK_THAT(check({{{0, 1}, {2}}}, 2, lengths, 100), Catch::Contains("id 3 is never"));
  CHECK_THAT(check({{{0, 1}, {2, 9}}}, 2, lengths, 100), Catch::Contains("not a position"));
  CHECK_THAT(check({{{0}, {1}}, {{2}, {3}}}, 2, {{30, 10, 10, 10}}, 20),
             Catch::Contains("needs a group of at least 2"));
  CHECK_THAT(check({{{0, 1}, {2, 3}}}, 2, lengths, 100, {2, 1}),
             Catch::Contains("static layout requires size 2"));
  // The whole pool is a valid group even when it is not a power of two.
  CHECK(check({Lists::value_type(6, {0, 1, 2, 3})}, 6, lengths, 100) == "");
}
