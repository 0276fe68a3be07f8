#pragma once
// Learning-rate schedule, with Megatron's semantics (scheduler.* keys):
//   iteration <= warmup:            lr = max_lr * iteration / warmup
//   warmup < iteration <= decay:    r = (iteration - warmup) / (decay - warmup)
//        constant: lr = max_lr
//        linear:   lr = min_lr + (max_lr - min_lr) * (1 - r)
//        cosine:   lr = min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * r))
//   iteration > decay:              lr = min_lr (constant: max_lr)
// `iteration` counts optimizer steps taken before this one (0 for the first step), so the
// first step of a warmup uses lr = 0 exactly as Megatron does.

#include <cstdint>

#include "config/enums.hpp"

namespace dyncp::train {

using config::LrDecayStyle;

struct LrSchedule {
  double max_lr = 1e-4;
  double min_lr = 0.0;
  std::int64_t warmup_iters = 0;
  std::int64_t decay_iters = 0;  // 0: no decay after warmup
  LrDecayStyle style = LrDecayStyle::constant;

  double lr_at(std::int64_t iteration) const;
};

}  // namespace dyncp::train
