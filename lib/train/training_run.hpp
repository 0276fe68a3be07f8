#pragma once
// The training run as named phases, with the data each hands to the next (docs/architecture.md
// §9). train::run_training (trainer.cpp) is these calls in order:
//
//   open_run     device, world (routed over NCCL + MPI on the GPU), parallel plan, parallel
//                state, output folders checked, the save folder locked, training data
//                opened                                                     -> OpenedRun
//   build_run    model options, model, weights (HF or seeded), step engine, held-out
//                evaluation, optimizer, LR schedule, checkpoint saver       -> BuiltRun
//   resume_run   the checkpoint every rank agrees on (or none), loop state, sampler
//                                                                            -> LoopStart
//   run_step_loop  steps until train.train_iters or a stop signal: one step (forward/backward,
//                clip, optimizer), evaluation when due, metrics, saves when due, signals
//   finish_run   measured memory, the final save, the HF export, the report
//
// Every phase is collective: every rank calls it with the same config. Objects that later
// phases hold references to (the world, the parallel state, the data, the model) live behind
// pointers, so handing a phase's result on never moves them.

#include <memory>

#include "config/config_container.hpp"
#include "data/sampler.hpp"
#include "dist/comm.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/checkpoint_saver.hpp"
#include "train/held_out_evaluation.hpp"
#include "train/loop_state.hpp"
#include "train/lr_schedule.hpp"
#include "train/optimizer.hpp"
#include "train/run_reporting.hpp"
#include "train/save_folder_lock.hpp"
#include "train/step_engine.hpp"
#include "train/trainer.hpp"
#include "train/training_data.hpp"
#include "train/training_device.hpp"

namespace dyncp::train {

struct OpenedRun {
  core::Device device = core::Device::cpu;
  std::unique_ptr<dist::Comm> routed_world;  // a GPU run's world; null on the CPU
  dist::Comm* world = nullptr;               // routed_world, or the launch world
  parallel::ParallelPlan plan;
  std::unique_ptr<dist::ParallelState> parallel_state;
  TrainingData training_data;
  std::string run_id;  // rank 0: this launch's (metrics, the save folder's lock)
  // Rank 0, with checkpoint.save: held until the run ends (train/save_folder_lock.hpp).
  std::unique_ptr<SaveFolderLock> save_lock;
};

struct BuiltRun {
  std::unique_ptr<model::Qwen3MoeModel> model;
  std::unique_ptr<HostParameters> host_parameters;
  std::unique_ptr<StepEngine> engine;
  std::unique_ptr<HeldOutEvaluation> evaluation;  // null without validation
  std::unique_ptr<AdamWOptimizer> optimizer;
  LrSchedule lr_schedule;  // the recipe's; resume_run may replace it with the saved one
  std::unique_ptr<CheckpointSaver> checkpoints;
};

struct LoopStart {
  LoopState state;
  std::unique_ptr<data::Sampler> sampler;  // positioned where the loop state says
  // The checkpoint came from outside checkpoint.save (checkpoint.load is another folder).
  bool resumed_from_elsewhere = false;
};

OpenedRun open_run(const config::ConfigContainer& config, dist::Comm& launch_world);
BuiltRun build_run(const config::ConfigContainer& config, OpenedRun& run);
LoopStart resume_run(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built);

// Whether any rank received a stop signal during start-up (all-reduced): the run then ends
// before its first step with nothing new to save.
bool stopped_during_startup(dist::Comm& world, std::int64_t iteration);

struct LoopEnd {
  bool stopped_by_signal = false;
  bool last_save_ok = true;  // the last periodic save worked (or none was due)
  double seconds = 0;        // wall time of the loop
};

// Runs steps from `start` until train.train_iters or a stop signal (agreed by every rank);
// counts them and the last loss in `report`.
LoopEnd run_step_loop(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built,
                      LoopStart& start, RunReporting& reporting, TrainerReport& report);

// After a stop signal: saves a checkpoint when checkpoint.save is set (a runtime error, exit 1,
// when it could not be written), else says that nothing is saved.
void finish_stopped_run(const config::ConfigContainer& config, BuiltRun& built,
                        const LoopState& state, RunReporting& reporting);
// After the last step: measured memory against the estimate, the final save when the last
// periodic one did not cover the end, the HF export (checkpoint.export_hf); a runtime error
// (exit 1) after the export when the final save failed.
void finish_run(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built,
                const LoopStart& start, const LoopEnd& end, RunReporting& reporting,
                const TrainerReport& report);

}  // namespace dyncp::train
