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
#include <string>

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
  bool operator==(const LrSchedule&) const = default;
};

// "max_lr 0.001, min_lr 0, warmup 0, decay 6 steps, cosine"
std::string describe(const LrSchedule& schedule);

// The schedule a resumed run follows: the checkpoint's, so that resuming with another
// train.train_iters (the default decay length) keeps the learning rate the saved run would have
// used at every step; with scheduler.override_opt_param_scheduler, this config's. A difference
// is logged either way, naming both.
LrSchedule resumed_lr_schedule(const LrSchedule& saved, const LrSchedule& configured,
                               bool override_saved);

}  // namespace dyncp::train
