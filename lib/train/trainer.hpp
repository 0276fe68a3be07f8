#pragma once
// The SFT loop: `dyncp-train --config recipe.yaml` after validation.
//
// Per step: the sampler's global batch (same on every rank) -> StepEngine (schedule, bins,
// forward/backward on the runtime groups, gradient sync) -> NaN/inf check -> clip -> AdamW with
// the step's LR -> metrics -> checkpoint when due -> stop signal check. Stops at
// train.train_iters; SIGTERM / SIGUSR1 save a checkpoint and exit 0.

#include <memory>

#include "config/config_container.hpp"
#include "dist/comm.hpp"

namespace dyncp::train {

struct TrainerReport {
  std::int64_t iterations = 0;  // optimizer steps this run took
  double last_loss = 0;
  bool stopped_by_signal = false;
};

// Builds everything from the resolved config on `world` and runs the loop. Collective: every
// rank calls it. Throws core::Error (config/data errors exit 2, runtime errors 1).
TrainerReport run_training(const config::ConfigContainer& config, dist::Comm& world);

}  // namespace dyncp::train
