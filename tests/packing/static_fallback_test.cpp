// default_dynamic_cp's static fallback under per-group alignment (packing/static_fallback.hpp):
// never a modelled step slower than static CP on the same lengths, Megatron's layout kept
// whenever it is not slower, and nothing changed under the pool rule.
#include "packing/static_fallback.hpp"

#include <catch2/catch.hpp>

#include "config/length_distribution.hpp"
#include "core/rng.hpp"
#include "packing/alignment.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/run_scheduler.hpp"
#include "packing_test_support.hpp"

using namespace dyncp;
using namespace dyncp::packing;
using config::PackingAlignment;
using testing::qwen3_cost;

TEST_CASE("default_dynamic_cp with per-group padding never models slower than static CP",
          "[packing]") {
  const char* distributions[] = {"lognormal:mean=1024,sigma=1.5,min=128,max=8192", "llama3_long",
                                 "lmsys", "trajectory:seq_length=32768"};
  int fallbacks = 0;
  int kept = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const auto layout = testing::random_layout(rng, 7);
    const std::int64_t dp = layout.data_parallel_size, cp = layout.context_parallel_size;
    const std::int64_t cap = layout.cap, min_cp = layout.min_group_size;
    const std::size_t count = layout.samples;
    std::vector<std::int64_t> lengths = config::sample_lengths(
        config::parse_length_distribution(distributions[seed % 4]), count, seed, 5);
    if (!testing::cap_for_static_layout(lengths, dp, cp, cap)) continue;
    SchedulerInput input{lengths, dp, cp, cap, min_cp};
    input.alignment = alignment_rule({dp, cp, true}, PackingAlignment::per_group);
    INFO("seed " << seed << " dp " << dp << " cp " << cp << " cap " << cap << " n " << count);
    bool used_static = false;
    const Schedule ours = schedule_default_dynamic_cp_or_static(input, qwen3_cost(), &used_static);
    REQUIRE(check_schedule(ours, lengths, cap, {0, min_cp, input.alignment}) == "");
    const CostModel& cost = qwen3_cost();
    const double t_ours = cost.step_time(ours, lengths, input.alignment).step_seconds;
    const Schedule megatron = schedule_default_dynamic_cp(input);
    const double t_megatron = cost.step_time(megatron, lengths, input.alignment).step_seconds;
    REQUIRE(t_ours <= t_megatron);
    if (used_static) {
      ++fallbacks;
      REQUIRE(t_ours < t_megatron);
    } else {
      ++kept;
      REQUIRE(ours.ids == megatron.ids);  // Megatron's layout whenever it is not slower
    }
    // Static CP as it runs, with its own padding (2 x cp).
    SchedulerInput static_input = input;
    static_input.alignment = alignment_rule({dp, cp, false}, PackingAlignment::per_group);
    static_input.min_group_size = 1;
    const double t_static =
        cost.step_time(schedule_dp_balanced(static_input), lengths, static_input.alignment)
            .step_seconds;
    if (cp >= min_cp) REQUIRE(t_ours <= t_static);
    // The trainer's dispatch runs exactly this.
    REQUIRE(run_scheduler(config::PackingScheduler::default_dynamic_cp, input, cost).ids ==
            ours.ids);
  }
  // Both branches are exercised.
  CHECK(fallbacks > 0);
  CHECK(kept > 0);
}

TEST_CASE("the pool rule keeps default_dynamic_cp Megatron's layout, id for id", "[packing]") {
  const auto d = config::parse_length_distribution("llama3_long");
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const std::int64_t dp = 8, cp = 8, cap = 8192;
    std::vector<std::int64_t> lengths = config::sample_lengths(d, 512, seed, 0);
    const std::int64_t multiple = alignment_multiple({dp, cp, true});
    for (auto& length : lengths) length = std::min(length, cp * cap / multiple * multiple);
    SchedulerInput input{lengths, dp, cp, cap};
    input.alignment = alignment_rule({dp, cp, true}, PackingAlignment::pool);
    bool used_static = true;
    const Schedule ours = schedule_default_dynamic_cp_or_static(input, qwen3_cost(), &used_static);
    CHECK_FALSE(used_static);
    const Schedule megatron = schedule_default_dynamic_cp(input);
    REQUIRE(ours.ids == megatron.ids);
    REQUIRE(ours.microbatch_offsets == megatron.microbatch_offsets);
  }
}

TEST_CASE("the static layout is a candidate only where dynamic CP may run it", "[packing]") {
  // cp x cap = 198 tokens per static group; a group of 2 pads to multiples of 4.
  const std::vector<std::int64_t> lengths = {196, 100, 90, 90};
  SchedulerInput input{lengths, 2, 2, 99};
  input.alignment = alignment_rule({2, 2, true}, PackingAlignment::per_group);
  REQUIRE(static_layout_candidate(input).has_value());
  input.min_group_size = 4;  // groups of cp = 2 ranks are not allowed
  CHECK_FALSE(static_layout_candidate(input).has_value());
  input.min_group_size = 1;
  const std::vector<std::int64_t> too_long = {196, 100, 90, 90, 197};  // 197 pads to 200 > 198
  input.lengths = too_long;
  CHECK_FALSE(static_layout_candidate(input).has_value());
}
