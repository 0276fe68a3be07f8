#pragma once
// The configured scheduler, as dyncp-train, its --dry-run and dyncp-plan run it: dp_balanced,
// default_dynamic_cp with its static fallback under per-group alignment
// (packing/static_fallback.hpp), or cost_aware.

#include "config/enums.hpp"
#include "packing/cost_model.hpp"
#include "packing/schedule.hpp"

namespace dyncp::packing {

Schedule run_scheduler(config::PackingScheduler scheduler, const SchedulerInput& input,
                       const CostModel& cost_model);

}  // namespace dyncp::packing
