// Per-group alignment: each sequence padded for the group it runs on (packing/alignment.hpp),
// through the rule, the schedulers, the contract check, the cost model and PackedSeqParams;
// and the pool rule on real lengths, which must reproduce Megatron's pre-padded inputs exactly.
#include <catch2/catch.hpp>

#include "config/length_distribution.hpp"
#include "core/rng.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_aware.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/packed_seq_params.hpp"
#include "packing_test_support.hpp"

using namespace dyncp;
using namespace dyncp::packing;
using config::PackingAlignment;
using testing::qwen3_cost;

namespace {

// Sum over the schedule of each sequence's length padded for its group.
std::int64_t padded_tokens(const Schedule& schedule, std::span<const std::int64_t> lengths,
                           const AlignmentRule& rule) {
  std::int64_t tokens = 0;
  for (const auto& group : schedule.groups)
    for (const auto id : schedule.ids_of(group))
      tokens += rule.padded(lengths[static_cast<std::size_t>(id)], group.size);
  return tokens;
}

}  // namespace

TEST_CASE("per-group rule: 2c on c ranks, none on one, x tp under SP; static keeps 2 cp",
          "[packing]") {
  const AlignmentRule per_group = alignment_rule({4, 2, true}, PackingAlignment::per_group);
  CHECK(per_group.multiple(1) == 1);
  CHECK(per_group.multiple(2) == 4);
  CHECK(per_group.multiple(8) == 16);
  CHECK(per_group.padded(5, 1) == 5);
  CHECK(per_group.padded(5, 2) == 8);
  CHECK(per_group.padded(300, 8) == 304);
  const AlignmentRule pool = alignment_rule({4, 2, true}, PackingAlignment::pool);
  CHECK(pool.multiple(1) == 16);  // Megatron: 2 x dp x cp for every group
  CHECK(pool.multiple(8) == 16);
  CHECK(pool.padded(5, 1) == 16);
  const AlignmentRule sp = alignment_rule({4, 2, true, 2, true}, PackingAlignment::per_group);
  CHECK(sp.multiple(1) == 2);
  CHECK(sp.multiple(4) == 16);
  // A static layout's groups all have cp ranks: both modes pad to 2 x cp.
  for (const auto mode : {PackingAlignment::per_group, PackingAlignment::pool}) {
    const AlignmentRule static_rule = alignment_rule({4, 2, false}, mode);
    CHECK(static_rule.multiple(2) == 4);
    CHECK(static_rule.padded(5, 2) == 8);
  }
  CHECK(alignment_rule({4, 2, true}, PackingAlignment::pool, 32).multiple(4) == 32);  // pad_to
  // The default rule pads nothing: lengths are taken as given.
  CHECK(AlignmentRule{}.padded(7, 4) == 7);
}

TEST_CASE("the group a sequence needs accounts for the padding of that group", "[packing]") {
  const AlignmentRule per_group = alignment_rule({8, 1, true}, PackingAlignment::per_group);
  // cap 99: 198 real tokens fit two ranks' 198, but padded to 4 they are 200: four ranks.
  CHECK(group_size_needed(198, 99, 1) == 2);
  CHECK(group_size_needed(198, 99, 1, per_group) == 4);
  CHECK(group_size_needed(196, 99, 1, per_group) == 2);
  CHECK(group_size_needed(99, 99, 1, per_group) == 1);  // one rank: no padding
  // Pool rule: the needed group of the pool-padded length.
  const AlignmentRule pool = alignment_rule({8, 1, true}, PackingAlignment::pool);
  CHECK(group_size_needed(90, 99, 1, pool) == 1);  // 96 tokens fit one rank
  CHECK(group_size_needed(98, 99, 1, pool) == 2);  // 112 tokens do not
  CHECK(group_size_needed(98, 99, 1, per_group) == 1);
}

TEST_CASE("pool rule on real lengths schedules id for id as Megatron's pre-padded lengths",
          "[packing]") {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const std::int64_t pool = std::int64_t{2} << rng.below(8);
    const std::int64_t cp = std::min<std::int64_t>(pool, std::int64_t{1} << rng.below(3));
    const std::int64_t dp = pool / cp;
    const std::int64_t cap = std::int64_t{512} << rng.below(3);
    const auto count = static_cast<std::size_t>(dp * static_cast<std::int64_t>(1 + rng.below(6)));
    auto d = config::parse_length_distribution("lognormal:mean=600,sigma=1.2,min=1");
    const std::int64_t multiple = alignment_multiple({dp, cp, true});
    d.max_length = cp * cap / multiple * multiple;
    if (d.max_length < multiple) continue;
    const std::vector<std::int64_t> real = config::sample_lengths(d, count, seed, 3);
    std::vector<std::int64_t> padded = real;
    for (auto& length : padded) length = padded_length(length, multiple);
    INFO("seed " << seed << " dp " << dp << " cp " << cp << " cap " << cap);
    SchedulerInput given{padded, dp, cp, cap};  // Megatron's input: already padded
    SchedulerInput ruled{real, dp, cp, cap};
    ruled.alignment = alignment_rule({dp, cp, true}, PackingAlignment::pool);
    const Schedule megatron = schedule_default_dynamic_cp(given);
    const Schedule ours = schedule_default_dynamic_cp(ruled);
    REQUIRE(ours.ids == megatron.ids);
    REQUIRE(ours.microbatch_offsets == megatron.microbatch_offsets);
    REQUIRE(ours.groups.size() == megatron.groups.size());
    for (std::size_t g = 0; g < ours.groups.size(); ++g) {
      REQUIRE(ours.groups[g].start_rank == megatron.groups[g].start_rank);
      REQUIRE(ours.groups[g].size == megatron.groups[g].size);
    }
    // dp_balanced: static padding 2 x cp in both modes.
    std::vector<std::int64_t> static_padded = real;
    for (auto& length : static_padded) length = padded_length(length, cp > 1 ? 2 * cp : 1);
    SchedulerInput static_given{static_padded, dp, cp, cap};
    SchedulerInput static_ruled{real, dp, cp, cap};
    static_ruled.alignment = alignment_rule({dp, cp, false}, PackingAlignment::per_group);
    REQUIRE(schedule_dp_balanced(static_ruled).ids == schedule_dp_balanced(static_given).ids);
    REQUIRE(qwen3_cost().step_time(ours, real, ruled.alignment).step_seconds ==
            qwen3_cost().step_time(megatron, padded).step_seconds);
  }
}

TEST_CASE("per-group schedules meet the contract with each length padded for its group",
          "[packing]") {
  const char* distributions[] = {"lognormal:mean=1024,sigma=1.5,min=1,max=8192",
                                 "llama3_long:long_fraction=0.02", "lmsys",
                                 "uniform:min=1,max=3"};  // tiny: expansions must re-check room
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const std::int64_t pool = std::int64_t{2} << rng.below(seed % 20 == 0 ? 10 : 6);
    std::int64_t cp = 1;
    while (cp < 8 && cp * 2 <= pool && rng.below(3) != 0) cp *= 2;
    const std::int64_t dp = pool / cp;
    const bool tiny = seed % 4 == 3;
    const std::int64_t cap = tiny ? 4 + static_cast<std::int64_t>(rng.below(12))
                                  : (std::int64_t{1000} << rng.below(4)) + 1;  // odd caps too
    const std::int64_t min_cp = rng.below(6) == 0 ? std::min<std::int64_t>(2, pool) : 1;
    const auto count = static_cast<std::size_t>(dp * static_cast<std::int64_t>(1 + rng.below(12)));
    auto d = config::parse_length_distribution(distributions[seed % 4]);
    std::vector<std::int64_t> lengths = config::sample_lengths(d, count, seed, 4);
    if (!testing::cap_for_static_layout(lengths, dp, cp, cap)) continue;
    SchedulerInput input{lengths, dp, cp, cap, min_cp};
    input.alignment = alignment_rule({dp, cp, true}, PackingAlignment::per_group);
    SchedulerInput pool_input = input;
    pool_input.alignment = alignment_rule({dp, cp, true}, PackingAlignment::pool);
    const AlignmentRule static_rule = alignment_rule({dp, cp, false}, PackingAlignment::pool);
    SchedulerInput static_input = input;
    static_input.alignment = static_rule;
    INFO("seed " << seed << " dp " << dp << " cp " << cp << " cap " << cap << " n " << count);
    const Schedule dynamic = schedule_default_dynamic_cp(input);
    REQUIRE(check_schedule(dynamic, lengths, cap, {0, min_cp, input.alignment}) == "");
    const Schedule ours = schedule_cost_aware(input, qwen3_cost());
    REQUIRE(check_schedule(ours, lengths, cap, {0, min_cp, input.alignment}) == "");
    const Schedule tree = schedule_buddy_tree(input, qwen3_cost(), 1.0);
    REQUIRE(check_schedule(tree, lengths, cap, {0, min_cp, input.alignment}) == "");
    // Never more padding than Megatron's rule gives the same schedule.
    REQUIRE(padded_tokens(ours, lengths, input.alignment) <=
            padded_tokens(ours, lengths, pool_input.alignment));
    const CostModel& cost = qwen3_cost();
    const double t_ours = cost.step_time(ours, lengths, input.alignment).step_seconds;
    // cost_aware never models slower than static CP with static CP's own padding, nor than
    // Megatron's default_dynamic_cp with the same padding (up to the full-search size).
    if (cp >= min_cp) {
      const double t_static =
          cost.step_time(schedule_dp_balanced(static_input), lengths, static_rule).step_seconds;
      REQUIRE(t_ours <= t_static);
    }
    if (count <= kCostAwareFullSearchSamples)  // else not a candidate (host time)
      REQUIRE(t_ours <= cost.step_time(dynamic, lengths, input.alignment).step_seconds);
    const double bound = cost.lower_bound_seconds(lengths, pool, cap, min_cp, input.alignment);
    const double tight =
        cost.tight_lower_bound_seconds(lengths, pool, cap, min_cp, input.alignment);
    REQUIRE(bound <= tight * (1 + 1e-9));
    REQUIRE(tight <= t_ours * (1 + 1e-9));
  }
}

TEST_CASE("contract check and step time charge each group its own padding", "[packing]") {
  // Real lengths 5 and 3 on a group of 2 ranks (padded 8 + 4), 7 alone on one rank (7).
  const std::vector<std::int64_t> lengths = {5, 3, 7};
  const std::int64_t pair[] = {0, 1};
  const std::int64_t alone[] = {2};
  Schedule schedule;
  schedule.pool_size = 3;
  schedule.begin_microbatch();
  schedule.add_group(0, 2, pair);
  schedule.add_group(2, 1, alone);
  schedule.end_microbatch();
  const AlignmentRule rule = alignment_rule({3, 1, true}, PackingAlignment::per_group);
  // cap 7: the pair holds 12 padded tokens <= 14, the single rank 7 <= 7; at cap 5 the pair's
  // 12 padded tokens exceed 10 although its 8 real tokens would not.
  CHECK(check_schedule(schedule, lengths, 7, {0, 1, rule}) == "");
  CHECK_THAT(check_schedule(schedule, lengths, 5, {0, 1, rule}),
             Catch::Contains("holds 12 tokens"));
  const std::vector<std::int64_t> padded = {8, 4, 7};
  CHECK(qwen3_cost().step_time(schedule, lengths, rule).step_seconds ==
        qwen3_cost().step_time(schedule, padded).step_seconds);
}

TEST_CASE("PackedSeqParams pad for the group in this microbatch, folded on request", "[packing]") {
  const std::vector<std::int64_t> lengths = {5, 3, 7};
  Schedule schedule;
  schedule.pool_size = 2;
  const std::int64_t pair[] = {0, 1};
  const std::int64_t one[] = {2};
  const std::int64_t other[] = {0};
  schedule.begin_microbatch();
  schedule.add_group(0, 2, pair);
  schedule.end_microbatch();
  schedule.begin_microbatch();
  schedule.add_group(0, 1, one);
  schedule.add_group(1, 1, other);
  schedule.end_microbatch();
  const AlignmentRule rule = alignment_rule({2, 1, true}, PackingAlignment::per_group);
  // The header's worked example: 5 and 3 padded to 8 and 4 on two ranks, rank 1 keeps
  // chunks 1 and 2 of each.
  const PackedSeqParams on_two = make_packed_seq_params(schedule, 0, 1, lengths, rule, false);
  CHECK(on_two.cu_seqlens == std::vector<std::int64_t>{0, 5, 8});
  CHECK(on_two.cu_seqlens_padded == std::vector<std::int64_t>{0, 8, 12});
  CHECK(on_two.local_num_tokens == 6);
  // One rank: no padding at all.
  const PackedSeqParams alone = make_packed_seq_params(schedule, 1, 0, lengths, rule, false);
  CHECK(alone.cu_seqlens_padded == std::vector<std::int64_t>{0, 7});
  CHECK(alone.cu_seqlens == std::vector<std::int64_t>{0, 7});
  // Folded: the group's padded length is reported as the sequence length.
  const PackedSeqParams folded = make_packed_seq_params(schedule, 0, 0, lengths, rule, true);
  CHECK(folded.cu_seqlens == folded.cu_seqlens_padded);
  CHECK(folded.cu_seqlens_padded == std::vector<std::int64_t>{0, 8, 12});
  // The pool rule pads to 2 x pool = 4 on every group.
  const AlignmentRule pool = alignment_rule({2, 1, true}, PackingAlignment::pool);
  CHECK(make_packed_seq_params(schedule, 1, 0, lengths, pool, false).cu_seqlens_padded ==
        std::vector<std::int64_t>{0, 8});
}
