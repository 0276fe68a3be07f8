#include "train/trainer.hpp"

#include "train/training_run.hpp"

namespace dyncp::train {

TrainerReport run_training(const config::ConfigContainer& config, dist::Comm& launch_world) {
  OpenedRun run = open_run(config, launch_world);
  BuiltRun built = build_run(config, run);
  LoopStart start = resume_run(config, run, built);
  TrainerReport report;
  if (stopped_during_startup(*run.world, start.state.iteration)) {
    report.stopped_by_signal = true;
    return report;
  }
  RunReporting reporting(config, *run.world, run.run_id);
  const LoopEnd end = run_step_loop(config, run, built, start, reporting, report);
  if (end.stopped_by_signal) {
    report.stopped_by_signal = true;
    finish_stopped_run(config, built, start.state, reporting);
  } else {
    finish_run(config, run, built, start, end, reporting, report);
  }
  return report;
}

}  // namespace dyncp::train
