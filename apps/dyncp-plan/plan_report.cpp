#include "plan_report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/enums.hpp"
#include "core/error.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/run_scheduler.hpp"
#include "packing/static_fallback.hpp"

namespace dyncp::plan {
namespace {

packing::Schedule run_scheduler(const PlanSettings& settings, const packing::SchedulerInput& input,
                                const packing::CostModel& cost_model, bool& static_fallback) {
  const auto scheduler = config::parse_enum<config::PackingScheduler>(settings.scheduler);
  DYNCP_CHECK(scheduler.has_value(), "scheduler names are checked before planning");
  if (*scheduler == config::PackingScheduler::default_dynamic_cp) {
    return packing::schedule_default_dynamic_cp_or_static(input, cost_model, &static_fallback);
  }
  return packing::run_scheduler(*scheduler, input, cost_model);
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
  static const std::vector<std::string> names = [] {
    const auto& known = config::EnumTraits<config::PackingScheduler>::names;
    return std::vector<std::string>(known.begin(), known.end());
  }();
  return names;
}

StepPlan plan_step(const PlanSettings& settings, std::vector<std::int64_t> lengths,
                   const packing::CostModel& cost_model, std::int64_t step) {
  StepPlan plan;
  plan.step = step;
  plan.lengths = std::move(lengths);
  packing::SchedulerInput input{plan.lengths, settings.data_parallel_size,
                                settings.context_parallel_size, settings.max_seqlen_per_dp_cp_rank,
                                settings.min_group_size};
  input.alignment = settings.alignment;
  const auto start = std::chrono::steady_clock::now();
  plan.schedule = run_scheduler(settings, input, cost_model, plan.static_fallback);
  plan.host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const bool is_static = settings.scheduler == "dp_balanced";
  const std::string problem =
      packing::check_schedule(plan.schedule, plan.lengths, settings.max_seqlen_per_dp_cp_rank,
                              {is_static ? settings.context_parallel_size : 0,
                               is_static ? 1 : settings.min_group_size, settings.alignment});
  if (!problem.empty()) {
    core::throw_runtime_error(settings.scheduler +
                              " produced a schedule that breaks the "
                              "contract (a bug): " +
                              problem);
  }
  for (const auto& group : plan.schedule.groups)
    for (const auto id : plan.schedule.ids_of(group))
      plan.padded_tokens +=
          settings.alignment.padded(plan.lengths[static_cast<std::size_t>(id)], group.size);
  plan.modelled = cost_model.step_time(plan.schedule, plan.lengths, settings.alignment);
  // Static CP as it would run: the static layout's own padding.
  packing::SchedulerInput static_input = input;
  static_input.alignment = settings.static_alignment;
  static_input.min_group_size = 1;
  try {
    plan.static_step_ms = 1e3 * cost_model
                                    .step_time(packing::schedule_dp_balanced(static_input),
                                               plan.lengths, settings.static_alignment)
                                    .step_seconds;
  } catch (const core::Error&) {
    // The static layout cannot run this batch (a sequence above cp x cap): no comparison.
  }
  try {
    // As dyncp-train runs it: with the static fallback under per-group alignment.
    plan.dynamic_step_ms =
        1e3 * cost_model
                  .step_time(packing::run_scheduler(config::PackingScheduler::default_dynamic_cp,
                                                    input, cost_model),
                             plan.lengths, settings.alignment)
                  .step_seconds;
  } catch (const core::Error&) {
  }
  plan.lower_bound_ms =
      1e3 * cost_model.lower_bound_seconds(plan.lengths, input.pool_size(),
                                           settings.max_seqlen_per_dp_cp_rank,
                                           settings.min_group_size, settings.alignment);
  plan.tight_lower_bound_ms =
      1e3 * cost_model.tight_lower_bound_seconds(plan.lengths, input.pool_size(),
                                                 settings.max_seqlen_per_dp_cp_rank,
                                                 settings.min_group_size, settings.alignment);
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
  stats["padded_tokens"] = plan.padded_tokens;
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
  stats["pipeline_bubble_fraction"] = plan.modelled.pipeline_bubble_fraction;
  stats["static_step_ms"] =
      plan.static_step_ms ? nlohmann::json(*plan.static_step_ms) : nlohmann::json(nullptr);
  stats["default_dynamic_cp_step_ms"] =
      plan.dynamic_step_ms ? nlohmann::json(*plan.dynamic_step_ms) : nlohmann::json(nullptr);
  stats["lower_bound_ms"] = plan.lower_bound_ms;
  stats["tight_lower_bound_ms"] = plan.tight_lower_bound_ms;
  stats["host_ms"] = plan.host_ms;
  if (settings.scheduler == "default_dynamic_cp") stats["static_fallback"] = plan.static_fallback;
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
     << settings.data_parallel_size << " x cp " << settings.context_parallel_size
     << (settings.tensor_parallel_size > 1
             ? ", each pool rank a TP group of " + std::to_string(settings.tensor_parallel_size)
             : std::string())
     << "), cap " << settings.max_seqlen_per_dp_cp_rank << ", " << plan.lengths.size()
     << " samples, " << tokens << " tokens (" << plan.padded_tokens << " padded)\n";
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
  if (plan.modelled.pipeline_bubble_fraction > 0) {
    os << "  pipeline bubble           "
       << format("%.1f", 100.0 * plan.modelled.pipeline_bubble_fraction)
       << "% of the step (per-stage loads above; 1F1B order, packing/pipeline_schedule.hpp)\n";
  }
  if (plan.static_fallback) {
    os << "  layout                    static (Megatron's greedy models a longer step)\n";
  }
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

void PlanSummary::Ratio::add(double value) {
  log_sum += std::log(value);
  worst = std::max(worst, value);
  ++count;
}

double PlanSummary::Ratio::geometric_mean() const {
  return count > 0 ? std::exp(log_sum / static_cast<double>(count)) : 0.0;
}

void PlanSummary::add(const StepPlan& plan) {
  const double step_ms = 1e3 * plan.modelled.step_seconds;
  ++steps_;
  for (const auto length : plan.lengths) real_tokens_ += length;
  padded_tokens_ += plan.padded_tokens;
  step_ms_sum_ += step_ms;
  step_ms_worst_ = std::max(step_ms_worst_, step_ms);
  host_ms_sum_ += plan.host_ms;
  host_ms_worst_ = std::max(host_ms_worst_, plan.host_ms);
  if (plan.static_step_ms) {
    vs_static_.add(step_ms / *plan.static_step_ms);
    slower_than_static_ += step_ms > *plan.static_step_ms;
  }
  if (plan.dynamic_step_ms) vs_dynamic_.add(step_ms / *plan.dynamic_step_ms);
  vs_bound_.add(step_ms / plan.tight_lower_bound_ms);
  static_fallbacks_ += plan.static_fallback;
}

std::string PlanSummary::render_json() const {
  const auto ratio = [](const Ratio& r) {
    return r.count > 0 ? nlohmann::json{{"geomean", r.geometric_mean()}, {"worst", r.worst}}
                       : nlohmann::json(nullptr);
  };
  nlohmann::json summary = {
      {"steps", steps_},
      {"tokens", real_tokens_},
      {"padded_tokens", padded_tokens_},
      {"modelled_step_ms",
       {{"mean", step_ms_sum_ / static_cast<double>(steps_)}, {"worst", step_ms_worst_}}},
      {"vs_static", ratio(vs_static_)},
      {"steps_slower_than_static", slower_than_static_},
      {"steps_on_static_layout", static_fallbacks_},
      {"vs_default_dynamic_cp", ratio(vs_dynamic_)},
      {"vs_tight_lower_bound", ratio(vs_bound_)},
      {"host_ms",
       {{"mean", host_ms_sum_ / static_cast<double>(steps_)}, {"worst", host_ms_worst_}}}};
  return nlohmann::json{{"summary", summary}}.dump();
}

std::string PlanSummary::render_table() const {
  std::ostringstream os;
  const auto ratio = [&](const char* name, const Ratio& r) {
    if (r.count == 0) return;
    os << "  " << name << format("%.3f", r.geometric_mean()) << "x geomean, "
       << format("%.3f", r.worst) << "x worst (" << r.count << " steps)\n";
  };
  os << "summary over " << steps_ << " steps: " << real_tokens_ << " tokens, " << padded_tokens_
     << " padded ("
     << format("%.1f", 100.0 * static_cast<double>(padded_tokens_ - real_tokens_) /
                           static_cast<double>(std::max<std::int64_t>(padded_tokens_, 1)))
     << "% padding)\n";
  os << "  modelled step             mean "
     << format("%.1f", step_ms_sum_ / static_cast<double>(steps_)) << " ms, worst "
     << format("%.1f", step_ms_worst_) << " ms\n";
  ratio("vs static CP              ", vs_static_);
  if (vs_static_.count > 0) {
    os << "  steps slower than static  " << slower_than_static_ << "\n";
  }
  if (static_fallbacks_ > 0) {
    os << "  steps on the static layout " << static_fallbacks_
       << " (default_dynamic_cp's fallback: Megatron's greedy models a longer step)\n";
  }
  ratio("vs default_dynamic_cp     ", vs_dynamic_);
  ratio("vs tight lower bound      ", vs_bound_);
  os << "  host time                 mean "
     << format("%.3f", host_ms_sum_ / static_cast<double>(steps_)) << " ms, worst "
     << format("%.3f", host_ms_worst_) << " ms\n";
  return os.str();
}

}  // namespace dyncp::plan
