#include "packing/run_scheduler.hpp"

#include "core/error.hpp"
#include "packing/cost_aware.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/static_fallback.hpp"

namespace dyncp::packing {

Schedule run_scheduler(config::PackingScheduler scheduler, const SchedulerInput& input,
                       const CostModel& cost_model) {
  switch (scheduler) {
    case config::PackingScheduler::dp_balanced:
      return schedule_dp_balanced(input);
    case config::PackingScheduler::default_dynamic_cp:
      return schedule_default_dynamic_cp_or_static(input, cost_model);
    case config::PackingScheduler::cost_aware:
      return schedule_cost_aware(input, cost_model);
  }
  core::throw_runtime_error("unknown packing scheduler");
}

}  // namespace dyncp::packing
