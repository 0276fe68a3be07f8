#include "train/lr_schedule.hpp"

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

}  // namespace dyncp::train
