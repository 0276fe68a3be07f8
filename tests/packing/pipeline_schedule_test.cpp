// The pipeline schedules as lists (1F1B and interleaved 1F1B), their rules and their timing.

#include "packing/pipeline_schedule.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "core/error.hpp"

using namespace dyncp::packing;

namespace {

constexpr auto F = PipelinePass::forward;
constexpr auto B = PipelinePass::backward;

// Every (microbatch, chunk) runs forward once and backward once, the backward after the forward,
// and at most `limit` forwards wait for their backward at any time.
void check_complete(const std::vector<PipelineAction>& actions, std::int64_t microbatches,
                    std::int64_t chunks, std::int64_t limit) {
  std::set<std::pair<std::int64_t, std::int64_t>> forwards, backwards;
  std::int64_t waiting = 0, most = 0;
  for (const PipelineAction& a : actions) {
    const auto key = std::pair{a.microbatch, a.chunk};
    if (a.pass == F) {
      CHECK(forwards.insert(key).second);
      most = std::max(most, ++waiting);
    } else {
      CHECK(forwards.count(key) == 1);
      CHECK(backwards.insert(key).second);
      --waiting;
    }
  }
  CHECK(forwards.size() == static_cast<std::size_t>(microbatches * chunks));
  CHECK(backwards.size() == forwards.size());
  CHECK(most <= limit);
}

}  // namespace

TEST_CASE("1F1B: warm-up forwards, pairs, cool-down backwards", "[packing][pipeline]") {
  // pp 4, M 6, stage 1: 2 warm-up forwards, 4 pairs, 2 cool-down backwards.
  const auto stage1 = one_f_one_b_schedule(4, 1, 6);
  CHECK(stage1 == std::vector<PipelineAction>{{F, 0, 0},
                                              {F, 1, 0},
                                              {F, 2, 0},
                                              {B, 0, 0},
                                              {F, 3, 0},
                                              {B, 1, 0},
                                              {F, 4, 0},
                                              {B, 2, 0},
                                              {F, 5, 0},
                                              {B, 3, 0},
                                              {B, 4, 0},
                                              {B, 5, 0}});
  // The last stage alternates from the start.
  CHECK(one_f_one_b_schedule(4, 3, 2) ==
        std::vector<PipelineAction>{{F, 0, 0}, {B, 0, 0}, {F, 1, 0}, {B, 1, 0}});
  for (std::int64_t pp : {2, 4, 8}) {
    for (std::int64_t m : {1, 3, 8, 13}) {
      for (std::int64_t s = 0; s < pp; ++s) {
        INFO("pp " << pp << " M " << m << " stage " << s);
        check_complete(one_f_one_b_schedule(pp, s, m), m, 1, std::min(pp - s, m));
      }
    }
  }
}

TEST_CASE("interleaved 1F1B: Megatron's chunk order and microbatch groups of pp",
          "[packing][pipeline]") {
  // pp 2, v 2, M 4, stage 0: forwards run microbatches 0, 1 of chunk 0, then 0, 1 of chunk 1,
  // then 2, 3 of chunk 0 ...; warm-up 2 (pp - 1) + (v - 1) pp = 4 passes.
  const auto stage0 = interleaved_schedule(2, 2, 0, 4);
  REQUIRE(stage0.size() == 16);
  CHECK(std::vector<PipelineAction>(stage0.begin(), stage0.begin() + 6) ==
        std::vector<PipelineAction>{
            {F, 0, 0}, {F, 1, 0}, {F, 0, 1}, {F, 1, 1}, {F, 2, 0}, {B, 0, 1}});
  for (std::int64_t pp : {2, 4}) {
    for (std::int64_t v : {2, 3}) {
      for (std::int64_t m : {pp, 2 * pp, 3 * pp}) {
        for (std::int64_t s = 0; s < pp; ++s) {
          INFO("pp " << pp << " v " << v << " M " << m << " stage " << s);
          check_complete(interleaved_schedule(pp, v, s, m), m, v,
                         m == pp ? m * v : 2 * (pp - s - 1) + (v - 1) * pp + 1);
        }
      }
    }
  }
}

TEST_CASE("pipeline rules: interleaving needs pp > 1 and a multiple of pp microbatches",
          "[packing][pipeline]") {
  CHECK(pipeline_microbatch_problem(4, 1, 3).empty());  // 1F1B takes any count
  CHECK_THAT(pipeline_microbatch_problem(4, 2, 6),
             Catch::Contains("6 microbatches is not a multiple of "
                             "model.pipeline_model_parallel_size 4"));
  CHECK_THAT(pipeline_microbatch_problem(1, 2, 4),
             Catch::Contains("model.virtual_pipeline_model_parallel_size: 2"));
  CHECK_THROWS_WITH(interleaved_schedule(4, 2, 0, 6), Catch::Contains("groups of pp"));
  CHECK(scheduled_microbatches(4, 2, 6) == 8);
  CHECK(scheduled_microbatches(4, 1, 6) == 6);
}

TEST_CASE("simulated bubble equals (pp - 1) / (v M + pp - 1) at equal pass times",
          "[packing][pipeline]") {
  for (std::int64_t pp : {2, 4, 8}) {
    for (std::int64_t m : {1, 4, 8, 16, 32}) {
      // 1F1B with backward = 2 x forward, as a real step.
      const PipelineTiming one = simulate_pipeline(
          pp, 1, m, [](auto, auto) { return 1.0; }, [](auto, auto) { return 2.0; });
      INFO("pp " << pp << " M " << m);
      CHECK(one.step_seconds == Approx(3.0 * static_cast<double>(m + pp - 1)));
      CHECK(one.bubble_fraction == Approx(modelled_bubble_fraction(pp, 1, m)));
      CHECK(one.peak_in_flight == std::min(pp, m));
      if (m % pp != 0) continue;
      for (std::int64_t v : {2, 4}) {
        INFO("v " << v);
        const double pass = 1.0 / static_cast<double>(v);
        const PipelineTiming interleaved = simulate_pipeline(
            pp, v, m, [&](auto, auto) { return pass; }, [&](auto, auto) { return pass; });
        CHECK(interleaved.bubble_fraction == Approx(modelled_bubble_fraction(pp, v, m)));
        // The interleaved bubble is smaller than 1F1B's at the same M.
        if (m > 1) CHECK(interleaved.bubble_fraction < one.bubble_fraction);
      }
    }
  }
  // More, smaller microbatches: the same work in twice as many pieces has a smaller bubble.
  const PipelineTiming few = simulate_pipeline(
      4, 1, 4, [](auto, auto) { return 2.0; }, [](auto, auto) { return 4.0; });
  const PipelineTiming many = simulate_pipeline(
      4, 1, 8, [](auto, auto) { return 1.0; }, [](auto, auto) { return 2.0; });
  CHECK(many.step_seconds < few.step_seconds);
  // A transfer between stages lengthens the critical path by 2 (pp - 1) transfers at M = 1.
  const PipelineTiming sent = simulate_pipeline(
      4, 1, 1, [](auto, auto) { return 1.0; }, [](auto, auto) { return 2.0; }, 0.5);
  CHECK(sent.step_seconds == Approx(4 * 3.0 + 2 * 3 * 0.5));
}

TEST_CASE("simulated pipeline: uneven microbatches wait for the slowest stage pass",
          "[packing][pipeline]") {
  // Microbatch 1 takes 4x as long: every stage waits on it; the busy time is the sum.
  const auto forward = [](std::int64_t m, std::int64_t) { return m == 1 ? 4.0 : 1.0; };
  const auto backward = [&](std::int64_t m, std::int64_t c) { return 2 * forward(m, c); };
  const PipelineTiming timing = simulate_pipeline(2, 1, 3, forward, backward);
  CHECK(timing.busy_seconds == Approx(2 * (3 + 12 + 3)));
  CHECK(timing.step_seconds >= 18.0);
  CHECK(timing.bubble_fraction > 0.0);
}

#include "packing/cost_model.hpp"
#include "packing/dp_balanced.hpp"

TEST_CASE("the cost model's step includes the pipeline bubble", "[packing][pipeline]") {
  const auto architecture = qwen3_30b_a3b_architecture();
  CostModelParameters flat;
  const CostModel one_stage(model_cost_from_architecture(architecture), flat);
  CostModelParameters piped = flat;
  piped.pipeline_stages = 4;
  const CostModel four_stages(model_cost_from_architecture(architecture), piped);
  piped.pipeline_virtual_chunks = 2;
  const CostModel interleaved(model_cost_from_architecture(architecture), piped);
  // 32 samples of 4096 on dp 2: 16 microbatches.
  const std::vector<std::int64_t> lengths(32, 4096);
  SchedulerInput input{lengths, 2, 1, 4096, 1};
  const Schedule schedule = schedule_dp_balanced(input);
  REQUIRE(schedule.num_microbatches() == 16);
  const auto flat_step = one_stage.step_time(schedule, lengths, input.alignment);
  const auto pp_step = four_stages.step_time(schedule, lengths, input.alignment);
  const auto v_step = interleaved.step_time(schedule, lengths, input.alignment);
  CHECK(flat_step.pipeline_bubble_fraction == 0.0);
  // Equal microbatches: each stage does a quarter of the work plus the (pp - 1) / (M + pp - 1)
  // bubble.
  CHECK(pp_step.pipeline_bubble_fraction == Approx(modelled_bubble_fraction(4, 1, 16)));
  CHECK(pp_step.step_seconds ==
        Approx(flat_step.step_seconds / 4 / (1 - modelled_bubble_fraction(4, 1, 16))));
  CHECK(v_step.pipeline_bubble_fraction == Approx(modelled_bubble_fraction(4, 2, 16)));
  CHECK(v_step.step_seconds < pp_step.step_seconds);
}
