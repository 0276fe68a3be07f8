#include "packing/pipeline_schedule.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace dyncp::packing {

namespace {

void check_sizes(std::int64_t stages, std::int64_t virtual_chunks, std::int64_t stage,
                 std::int64_t microbatches) {
  const std::string problem = pipeline_microbatch_problem(stages, virtual_chunks, microbatches);
  if (!problem.empty()) core::throw_runtime_error(problem);
  if (stage < 0 || stage >= stages) {
    core::throw_runtime_error("pipeline schedule: stage " + std::to_string(stage) +
                              " is outside [0, " + std::to_string(stages) + ")");
  }
}

}  // namespace

std::string pipeline_microbatch_problem(std::int64_t stages, std::int64_t virtual_chunks,
                                        std::int64_t microbatches) {
  if (stages < 1 || virtual_chunks < 1) {
    return "pipeline schedule: pp " + std::to_string(stages) + " and virtual chunks " +
           std::to_string(virtual_chunks) + " must be >= 1";
  }
  if (virtual_chunks > 1 && stages == 1) {
    return "model.virtual_pipeline_model_parallel_size: " + std::to_string(virtual_chunks) +
           ": interleaving needs model.pipeline_model_parallel_size > 1";
  }
  if (microbatches < 1) {
    return "pipeline schedule: a step needs at least one microbatch (got " +
           std::to_string(microbatches) + ")";
  }
  if (virtual_chunks > 1 && microbatches % stages != 0) {
    return "interleaved 1F1B runs microbatches in groups of pp: " + std::to_string(microbatches) +
           " microbatches is not a multiple of model.pipeline_model_parallel_size " +
           std::to_string(stages);
  }
  return "";
}

std::vector<PipelineAction> one_f_one_b_schedule(std::int64_t stages, std::int64_t stage,
                                                 std::int64_t microbatches) {
  check_sizes(stages, 1, stage, microbatches);
  const std::int64_t warmup = std::min(stages - stage - 1, microbatches);
  std::vector<PipelineAction> actions;
  actions.reserve(static_cast<std::size_t>(2 * microbatches));
  for (std::int64_t m = 0; m < warmup; ++m) actions.push_back({PipelinePass::forward, m, 0});
  for (std::int64_t i = 0; i < microbatches - warmup; ++i) {
    actions.push_back({PipelinePass::forward, warmup + i, 0});
    actions.push_back({PipelinePass::backward, i, 0});
  }
  for (std::int64_t m = microbatches - warmup; m < microbatches; ++m)
    actions.push_back({PipelinePass::backward, m, 0});
  return actions;
}

std::vector<PipelineAction> interleaved_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                                 std::int64_t stage, std::int64_t microbatches) {
  check_sizes(stages, virtual_chunks, stage, microbatches);
  const std::int64_t pp = stages, v = virtual_chunks;
  const std::int64_t total = microbatches * v;
  const auto pass = [&](std::int64_t k, PipelinePass kind) {
    const std::int64_t in_group = k % (pp * v);
    std::int64_t chunk = in_group / pp;
    if (kind == PipelinePass::backward) chunk = v - 1 - chunk;
    return PipelineAction{kind, (k / (pp * v)) * pp + k % pp, chunk};
  };
  const std::int64_t warmup =
      microbatches == pp ? total : std::min(2 * (pp - stage - 1) + (v - 1) * pp, total);
  std::vector<PipelineAction> actions;
  actions.reserve(static_cast<std::size_t>(2 * total));
  for (std::int64_t k = 0; k < warmup; ++k) actions.push_back(pass(k, PipelinePass::forward));
  for (std::int64_t i = 0; i < total - warmup; ++i) {
    actions.push_back(pass(warmup + i, PipelinePass::forward));
    actions.push_back(pass(i, PipelinePass::backward));
  }
  for (std::int64_t k = total - warmup; k < total; ++k)
    actions.push_back(pass(k, PipelinePass::backward));
  return actions;
}

std::vector<PipelineAction> pipeline_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                              std::int64_t stage, std::int64_t microbatches) {
  return virtual_chunks == 1 ? one_f_one_b_schedule(stages, stage, microbatches)
                             : interleaved_schedule(stages, virtual_chunks, stage, microbatches);
}

std::int64_t scheduled_microbatches(std::int64_t stages, std::int64_t virtual_chunks,
                                    std::int64_t microbatches) {
  if (virtual_chunks <= 1 || stages <= 1) return microbatches;
  return (microbatches + stages - 1) / stages * stages;
}

PipelineTiming simulate_pipeline(
    std::int64_t stages, std::int64_t virtual_chunks, std::int64_t microbatches,
    const std::function<double(std::int64_t, std::int64_t)>& forward_seconds,
    const std::function<double(std::int64_t, std::int64_t)>& backward_seconds,
    double transfer_seconds) {
  const std::int64_t pp = stages, v = virtual_chunks, m_count = microbatches;
  const std::int64_t virtual_stages = pp * v;
  std::vector<std::vector<PipelineAction>> lists;
  for (std::int64_t s = 0; s < pp; ++s) lists.push_back(pipeline_schedule(pp, v, s, m_count));
  // End times of each (microbatch, virtual stage) pass; NaN-free sentinel: -1 = not run yet.
  const auto index = [&](std::int64_t m, std::int64_t k) {
    return static_cast<std::size_t>(m * virtual_stages + k);
  };
  std::vector<double> forward_end(static_cast<std::size_t>(m_count * virtual_stages), -1.0);
  std::vector<double> backward_end(forward_end.size(), -1.0);
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::vector<double> free_at(static_cast<std::size_t>(pp), 0.0);
  std::vector<std::int64_t> in_flight(static_cast<std::size_t>(pp), 0);
  PipelineTiming timing;
  std::size_t remaining = 0;
  for (const auto& list : lists) remaining += list.size();
  while (remaining > 0) {
    bool progressed = false;
    for (std::int64_t s = 0; s < pp; ++s) {
      auto& cursor = next[static_cast<std::size_t>(s)];
      while (cursor < lists[static_cast<std::size_t>(s)].size()) {
        const PipelineAction& a = lists[static_cast<std::size_t>(s)][cursor];
        const std::int64_t k = a.chunk * pp + s;
        double ready = 0.0;
        if (a.pass == PipelinePass::forward && k > 0) {
          ready = forward_end[index(a.microbatch, k - 1)];
          if (ready < 0) break;
          ready += transfer_seconds;
        } else if (a.pass == PipelinePass::backward) {
          if (k + 1 < virtual_stages) {
            ready = backward_end[index(a.microbatch, k + 1)];
            if (ready < 0) break;
            ready += transfer_seconds;
          } else {
            ready = forward_end[index(a.microbatch, k)];
            if (ready < 0) break;
          }
        }
        double& free = free_at[static_cast<std::size_t>(s)];
        const double start = std::max(free, ready);
        const double length = a.pass == PipelinePass::forward
                                  ? forward_seconds(a.microbatch, a.chunk)
                                  : backward_seconds(a.microbatch, a.chunk);
        free = start + length;
        timing.busy_seconds += length;
        auto& flight = in_flight[static_cast<std::size_t>(s)];
        if (a.pass == PipelinePass::forward) {
          forward_end[index(a.microbatch, k)] = free;
          timing.peak_in_flight = std::max(timing.peak_in_flight, ++flight);
        } else {
          backward_end[index(a.microbatch, k)] = free;
          --flight;
        }
        ++cursor;
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) core::throw_runtime_error("pipeline schedule deadlocks (a bug)");
  }
  for (const double t : free_at) timing.step_seconds = std::max(timing.step_seconds, t);
  timing.bubble_fraction =
      timing.step_seconds > 0
          ? 1.0 - timing.busy_seconds / (static_cast<double>(pp) * timing.step_seconds)
          : 0.0;
  return timing;
}

double modelled_bubble_fraction(std::int64_t stages, std::int64_t virtual_chunks,
                                std::int64_t microbatches) {
  const double pp = static_cast<double>(stages);
  const double work = static_cast<double>(virtual_chunks * microbatches);
  return (pp - 1) / (work + pp - 1);
}

}  // namespace dyncp::packing
