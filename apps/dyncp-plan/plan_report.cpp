#include "plan_report.hpp"

#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "packing/cost_aware.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"

namespace dyncp::plan {
namespace {

packing::Schedule run_scheduler(const PlanSettings& settings, const packing::SchedulerInput& input,
                                const packing::CostModel& cost_model) {
  if (settings.scheduler == "dp_balanced") return packing::schedule_dp_balanced(input);
  if (settings.scheduler == "default_dynamic_cp")
    return packing::schedule_default_dynamic_cp(input);
  return packing::schedule_cost_aware(input, cost_model);
}

std::map<std::int64_t, std::int64_t> group_size_histogram(const packing::Schedule& schedule) {
  std::map<std::int64_t, std::int64_t> histogram;
  for (const auto& group : schedule.groups) ++histogram[group.size];
  return histogram;
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

}  // namespace

const std::vector<std::string>& scheduler_names() {
  static const std::vector<std::string> names = {"dp_balanced", "default_dynamic_cp", "cost_aware"};
  return names;
}

StepPlan plan_step(const PlanSettings& settings, std::vector<std::int64_t> lengths,
                   const packing::CostModel& cost_model, std::int64_t step) {
  StepPlan plan;
  plan.step = step;
  plan.lengths = std::move(lengths);
  const packing::SchedulerInput input{plan.lengths, settings.data_parallel_size,
                                      settings.context_parallel_size,
                                      settings.max_seqlen_per_dp_cp_rank, settings.min_group_size};
  const auto start = std::chrono::steady_clock::now();
  plan.schedule = run_scheduler(settings, input, cost_model);
  plan.host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const bool is_static = settings.scheduler == "dp_balanced";
  const std::string problem = packing::check_schedule(
      plan.schedule, plan.lengths, settings.max_seqlen_per_dp_cp_rank,
      {is_static ? settings.context_parallel_size : 0, is_static ? 1 : settings.min_group_size});
  if (!problem.empty()) {
    core::throw_runtime_error(settings.scheduler +
                              " produced a schedule that breaks the "
                              "contract (a bug): " +
                              problem);
  }
  plan.modelled = cost_model.step_time(plan.schedule, plan.lengths);
  try {
    plan.static_step_ms =
        1e3 * cost_model.step_time(packing::schedule_dp_balanced(input), plan.lengths).step_seconds;
  } catch (const core::Error&) {
    // The static layout cannot run this batch (a sequence above cp x cap): no comparison.
  }
  try {
    plan.dynamic_step_ms =
        1e3 * cost_model.step_time(packing::schedule_default_dynamic_cp(input), plan.lengths)
                  .step_seconds;
  } catch (const core::Error&) {
  }
  plan.lower_bound_ms = 1e3 * cost_model.lower_bound_seconds(plan.lengths, input.pool_size(),
                                                             settings.max_seqlen_per_dp_cp_rank,
                                                             settings.min_group_size);
  plan.tight_lower_bound_ms =
      1e3 * cost_model.tight_lower_bound_seconds(plan.lengths, input.pool_size(),
                                                 settings.max_seqlen_per_dp_cp_rank,
                                                 settings.min_group_size);
  return plan;
}

std::string render_json(const PlanSettings& settings, const StepPlan& plan) {
  nlohmann::json out;
  out["step"] = plan.step;
  out["scheduler"] = settings.scheduler;
  out["pool"] = settings.data_parallel_size * settings.context_parallel_size;
  out["microbatches"] = plan.schedule.rank_lists();
  nlohmann::json stats;
  std::int64_t tokens = 0;
  for (const auto length : plan.lengths) tokens += length;
  stats["samples"] = plan.lengths.size();
  stats["tokens"] = tokens;
  stats["microbatches"] = plan.schedule.num_microbatches();
  nlohmann::json histogram = nlohmann::json::object();
  for (const auto& [size, count] : group_size_histogram(plan.schedule)) {
    histogram[std::to_string(size)] = count;
  }
  stats["group_sizes"] = histogram;
  stats["rank_load_ms"] = {{"min", 1e3 * plan.modelled.min_rank_busy_seconds},
                           {"mean", 1e3 * plan.modelled.mean_rank_busy_seconds},
                           {"max", 1e3 * plan.modelled.max_rank_busy_seconds}};
  stats["balance"] = plan.modelled.mean_rank_busy_seconds / plan.modelled.step_seconds;
  stats["modelled_step_ms"] = 1e3 * plan.modelled.step_seconds;
  stats["static_step_ms"] =
      plan.static_step_ms ? nlohmann::json(*plan.static_step_ms) : nlohmann::json(nullptr);
  stats["default_dynamic_cp_step_ms"] =
      plan.dynamic_step_ms ? nlohmann::json(*plan.dynamic_step_ms) : nlohmann::json(nullptr);
  stats["lower_bound_ms"] = plan.lower_bound_ms;
  stats["tight_lower_bound_ms"] = plan.tight_lower_bound_ms;
  stats["host_ms"] = plan.host_ms;
  out["stats"] = stats;
  return out.dump();
}

std::string render_table(const PlanSettings& settings, const StepPlan& plan, bool print_schedule) {
  std::ostringstream os;
  const std::int64_t pool = settings.data_parallel_size * settings.context_parallel_size;
  std::int64_t tokens = 0;
  for (const auto length : plan.lengths) tokens += length;
  const double step_ms = 1e3 * plan.modelled.step_seconds;
  os << "step " << plan.step << ": " << settings.scheduler << " on " << pool << " ranks (dp "
     << settings.data_parallel_size << " x cp " << settings.context_parallel_size << "), cap "
     << settings.max_seqlen_per_dp_cp_rank << ", " << plan.lengths.size() << " samples, " << tokens
     << " tokens\n";
  os << "  microbatches              " << plan.schedule.num_microbatches() << "\n";
  os << "  group sizes (size: count) ";
  bool first = true;
  for (const auto& [size, count] : group_size_histogram(plan.schedule)) {
    os << (first ? "" : ", ") << size << ": " << count;
    first = false;
  }
  os << "\n";
  os << "  modelled per-rank load    min "
     << format("%.1f", 1e3 * plan.modelled.min_rank_busy_seconds) << " ms, mean "
     << format("%.1f", 1e3 * plan.modelled.mean_rank_busy_seconds) << " ms, max "
     << format("%.1f", 1e3 * plan.modelled.max_rank_busy_seconds) << " ms\n";
  os << "  balance (mean/step)       "
     << format("%.3f", plan.modelled.mean_rank_busy_seconds / plan.modelled.step_seconds) << "\n";
  os << "  modelled step             " << format("%.1f", step_ms) << " ms\n";
  if (plan.static_step_ms) {
    os << "  static CP (dp_balanced)   " << format("%.1f", *plan.static_step_ms)
       << " ms  (this: " << format("%.3f", step_ms / *plan.static_step_ms) << "x)\n";
  } else {
    os << "  static CP (dp_balanced)   cannot run this batch (a sequence above cp x cap)\n";
  }
  if (plan.dynamic_step_ms) {
    os << "  default_dynamic_cp        " << format("%.1f", *plan.dynamic_step_ms)
       << " ms  (this: " << format("%.3f", step_ms / *plan.dynamic_step_ms) << "x)\n";
  }
  os << "  lower bound               " << format("%.1f", plan.lower_bound_ms)
     << " ms  (this: " << format("%.3f", step_ms / plan.lower_bound_ms) << "x)\n";
  os << "  tight lower bound         " << format("%.1f", plan.tight_lower_bound_ms)
     << " ms  (this: " << format("%.3f", step_ms / plan.tight_lower_bound_ms) << "x)\n";
  os << "  host time                 " << format("%.3f", plan.host_ms) << " ms\n";
  if (print_schedule) {
    for (std::int64_t m = 0; m < plan.schedule.num_microbatches(); ++m) {
      os << "  microbatch " << m << ":";
      for (const auto& group : plan.schedule.groups_of(m)) {
        os << " ranks " << group.start_rank << ".." << group.start_rank + group.size - 1 << " [";
        const auto ids = plan.schedule.ids_of(group);
        for (std::size_t i = 0; i < ids.size(); ++i) os << (i ? "," : "") << ids[i];
        os << "]";
      }
      os << "\n";
    }
  }
  return os.str();
}

}  // namespace dyncp::plan
