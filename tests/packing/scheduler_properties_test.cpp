// Contract properties of both schedulers on seeded random batches, pools 2..1024.
#include <catch2/catch.hpp>

#include "config/length_distribution.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"

using namespace dyncp;
using namespace dyncp::packing;
using dyncp::config::LengthDistribution;
using dyncp::config::parse_length_distribution;
using dyncp::config::sample_lengths;

TEST_CASE("default_dynamic_cp meets the schedule contract on random batches, pools 2..1024",
          "[packing]") {
  for (std::uint64_t seed = 0; seed < 1500; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const std::int64_t pool = std::int64_t{2} << rng.below(10);  // 2 .. 1024
    const std::int64_t cp = std::int64_t{1} << rng.below(static_cast<std::uint64_t>(
                                std::min<std::int64_t>(4, 63 - __builtin_clzll(pool)) + 1));
    const std::int64_t cap = std::int64_t{256} << rng.below(4);
    const std::int64_t min_cp = rng.below(5) == 0 ? std::min<std::int64_t>(2, pool) : 1;
    const auto count = static_cast<std::size_t>(1 + rng.below(pool >= 256 ? 600 : 200));
    LengthDistribution d = parse_length_distribution("lognormal:mean=1024,sigma=1.5,min=16");
    d.max_length = std::min<std::int64_t>(pool * cap, 16 * cap);
    std::vector<std::int64_t> lengths = sample_lengths(d, count, seed, 0);
    SchedulerInput input{lengths, pool / cp, cp, cap, min_cp};
    const Schedule schedule = schedule_default_dynamic_cp(input);
    INFO("seed " << seed << " pool " << pool << " cap " << cap << " n " << count);
    REQUIRE(check_schedule(schedule, lengths, cap, {0, min_cp}) == "");
    if (seed % 50 == 0) {  // deterministic: same input, same schedule
      const Schedule again = schedule_default_dynamic_cp(input);
      REQUIRE(again.ids == schedule.ids);
      REQUIRE(again.microbatch_offsets == schedule.microbatch_offsets);
    }
  }
}

TEST_CASE("dp_balanced meets the static contract on random batches", "[packing]") {
  for (std::uint64_t seed = 0; seed < 1500; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const std::int64_t dp = 1 + static_cast<std::int64_t>(rng.below(64));
    const std::int64_t cp = 1 + static_cast<std::int64_t>(rng.below(8));
    const std::int64_t cap = 128 + static_cast<std::int64_t>(rng.below(4096));
    const auto count = static_cast<std::size_t>(dp * static_cast<std::int64_t>(1 + rng.below(8)));
    LengthDistribution d = parse_length_distribution("uniform:min=1,max=100");
    d.max_length = cp * cap;
    std::vector<std::int64_t> lengths = sample_lengths(d, count, seed, 1);
    SchedulerInput input{lengths, dp, cp, cap};
    const Schedule schedule = schedule_dp_balanced(input);
    INFO("seed " << seed << " dp " << dp << " cp " << cp);
    REQUIRE(check_schedule(schedule, lengths, cap, {cp, 1}) == "");
    // Bins keep global-id order inside, and bins of one microbatch are in id order.
    for (const auto& group : schedule.groups) {
      const auto ids = schedule.ids_of(group);
      for (std::size_t i = 1; i < ids.size(); ++i) REQUIRE(ids[i - 1] < ids[i]);
    }
  }
}

TEST_CASE("scheduler input errors name the sample or key and how to fix it", "[packing]") {
  using core::Error;
  auto error_of = [](auto scheduler, SchedulerInput input) -> std::string {
    try {
      scheduler(input);
    } catch (const Error& error) {
      CHECK(error.exit_code() == 2);
      return error.what();
    }
    return "no error";
  };
  std::vector<std::int64_t> too_long = {100, 900, 50};
  CHECK_THAT(error_of(schedule_default_dynamic_cp, {too_long, 2, 2, 200}),
             Catch::Contains("position 1") && Catch::Contains("length 900") &&
                 Catch::Contains("needs a group of 8"));
  CHECK_THAT(error_of(schedule_dp_balanced, {too_long, 2, 2, 200}),
             Catch::Contains("position 1") && Catch::Contains("exceeds cp x"));
  std::vector<std::int64_t> zero = {10, 0};
  CHECK_THAT(error_of(schedule_default_dynamic_cp, {zero, 1, 2, 200}),
             Catch::Contains("position 1") && Catch::Contains("not positive"));
  std::vector<std::int64_t> none;
  CHECK_THAT(error_of(schedule_dp_balanced, {none, 1, 2, 200}), Catch::Contains("empty"));
  std::vector<std::int64_t> ok = {10, 20};
  CHECK_THAT(error_of(schedule_default_dynamic_cp, {ok, 1, 2, 200, 4}),
             Catch::Contains("min_dynamic_context_parallel_size"));
  CHECK_THAT(error_of(schedule_default_dynamic_cp, {ok, 1, 2, 0}),
             Catch::Contains("max_seqlen_per_dp_cp_rank"));
  // Megatron's "Not enough samples to move": 2 samples cannot make 4 bins.
  CHECK_THAT(error_of(schedule_dp_balanced, {ok, 4, 1, 200}),
             Catch::Contains("multiple of data_parallel_size = 4"));
}
