#include "packing/run_scheduler.hpp"

#include <iterator>

#include "core/error.hpp"
#include "packing/cost_aware.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/static_fallback.hpp"

namespace dyncp::packing {

namespace {

struct SchedulerEntry {
  config::PackingScheduler scheduler;
  Schedule (*run)(const SchedulerInput& input, const CostModel& cost_model);
};

// One entry per scheduler; its name is its config::PackingScheduler value (config/enums.hpp),
// which the config rules, dyncp-plan and the key reference read.
constexpr SchedulerEntry scheduler_table[] = {
    {config::PackingScheduler::dp_balanced,
     [](const SchedulerInput& input, const CostModel&) { return schedule_dp_balanced(input); }},
    {config::PackingScheduler::default_dynamic_cp,
     [](const SchedulerInput& input, const CostModel& cost_model) {
       return schedule_default_dynamic_cp_or_static(input, cost_model);
     }},
    {config::PackingScheduler::cost_aware,
     [](const SchedulerInput& input, const CostModel& cost_model) {
       return schedule_cost_aware(input, cost_model);
     }},
};
static_assert(std::size(scheduler_table) ==
                  config::EnumTraits<config::PackingScheduler>::names.size(),
              "every config::PackingScheduler has one entry");

}  // namespace

Schedule run_scheduler(config::PackingScheduler scheduler, const SchedulerInput& input,
                       const CostModel& cost_model) {
  for (const SchedulerEntry& entry : scheduler_table)
    if (entry.scheduler == scheduler) return entry.run(input, cost_model);
  core::throw_runtime_error("unknown packing scheduler");
}

}  // namespace dyncp::packing
