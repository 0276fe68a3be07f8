#include "train/lr_schedule.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <numbers>

namespace dyncp::train {

double LrSchedule::lr_at(std::int64_t iteration) const {
  if (warmup_iters > 0 && iteration <= warmup_iters) {
    return max_lr * static_cast<double>(iteration) / static_cast<double>(warmup_iters);
  }
  if (style == LrDecayStyle::constant || decay_iters <= warmup_iters) return max_lr;
  if (iteration > decay_iters) return min_lr;
  const double ratio = static_cast<double>(iteration - warmup_iters) /
                       static_cast<double>(decay_iters - warmup_iters);
  const double span = max_lr - min_lr;
  if (style == LrDecayStyle::linear) return min_lr + span * (1.0 - ratio);
  return min_lr + span * 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
}

std::string describe(const LrSchedule& schedule) {
  return fmt::format("max_lr {}, min_lr {}, warmup {}, decay {} steps, {}", schedule.max_lr,
                     schedule.min_lr, schedule.warmup_iters, schedule.decay_iters,
                     config::to_string(schedule.style));
}

LrSchedule resumed_lr_schedule(const LrSchedule& saved, const LrSchedule& configured,
                               bool override_saved) {
  if (saved == configured) return saved;
  if (override_saved) {
    spdlog::warn(
        "scheduler.override_opt_param_scheduler: the LR schedule is this config's ({}), "
        "not the checkpoint's ({})",
        describe(configured), describe(saved));
    return configured;
  }
  spdlog::warn(
      "LR schedule: continuing the checkpoint's ({}); this config's differs ({}). Set "
      "scheduler.override_opt_param_scheduler=true to use this config's",
      describe(saved), describe(configured));
  return saved;
}

}  // namespace dyncp::train
