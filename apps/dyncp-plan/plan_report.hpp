#pragma once
// One step of dyncp-plan: run the chosen scheduler, check the contract, model the step, and
// render the result as a table or as one JSON line (schema in docs/packing.md).

#include <optional>
#include <string>
#include <vector>

#include "packing/cost_model.hpp"
#include "packing/schedule.hpp"

namespace dyncp::plan {

struct PlanSettings {
  std::string scheduler;  // dp_balanced | default_dynamic_cp | cost_aware
  std::int64_t data_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t max_seqlen_per_dp_cp_rank = 0;
  std::int64_t min_group_size = 1;
  packing::AlignmentRule alignment;         // the chosen scheduler's padding
  packing::AlignmentRule static_alignment;  // the static layout's (2 x cp), for comparison
  std::int64_t tensor_parallel_size = 1;    // each pool rank a TP group of this many devices
};

struct StepPlan {
  std::int64_t step = 0;
  std::vector<std::int64_t> lengths;  // as scheduled (each padded for its group by the rule)
  std::int64_t padded_tokens = 0;     // after padding each sequence for its group
  packing::Schedule schedule;
  double host_ms = 0.0;
  packing::CostModel::StepTime modelled;
  std::optional<double> static_step_ms;   // dp_balanced on the same lengths, if it can run them
  std::optional<double> dynamic_step_ms;  // default_dynamic_cp on the same lengths
  // default_dynamic_cp only: the static layout replaced Megatron's (packing/static_fallback).
  bool static_fallback = false;
  double lower_bound_ms = 0.0;
  double tight_lower_bound_ms = 0.0;
};

// Valid scheduler names, for --help and errors.
const std::vector<std::string>& scheduler_names();

StepPlan plan_step(const PlanSettings& settings, std::vector<std::int64_t> lengths,
                   const packing::CostModel& cost_model, std::int64_t step);

std::string render_json(const PlanSettings& settings, const StepPlan& plan);
std::string render_table(const PlanSettings& settings, const StepPlan& plan, bool print_schedule);

// Over all steps: means and worst cases of the modelled step and of its ratios to static CP,
// to default_dynamic_cp and to the tight lower bound (ratios: geometric mean and maximum).
class PlanSummary {
 public:
  void add(const StepPlan& plan);
  std::string render_json() const;
  std::string render_table() const;

 private:
  struct Ratio {
    double log_sum = 0.0;
    double worst = 0.0;
    std::int64_t count = 0;
    void add(double value);
    double geometric_mean() const;
  };
  std::int64_t steps_ = 0;
  std::int64_t real_tokens_ = 0;
  std::int64_t padded_tokens_ = 0;
  double step_ms_sum_ = 0.0;
  double step_ms_worst_ = 0.0;
  double host_ms_sum_ = 0.0;
  double host_ms_worst_ = 0.0;
  Ratio vs_static_;
  Ratio vs_dynamic_;
  Ratio vs_bound_;
  std::int64_t slower_than_static_ = 0;  // steps where this models slower than static CP
  std::int64_t static_fallbacks_ = 0;    // default_dynamic_cp steps on the static layout
};

}  // namespace dyncp::plan
