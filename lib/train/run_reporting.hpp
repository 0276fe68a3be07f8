#pragma once
// Where a run's steps are reported: the run id and resolved configuration (logged, and saved
// as <checkpoint.save>/config.yaml), the metrics sinks (train/metrics_sinks.hpp: JSONL,
// TensorBoard, W&B), the Megatron-style console line every logger.log_interval steps and the
// progress bar. Rank 0 writes; the other ranks hold no sinks, so every rank calls the same
// methods.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "dist/comm.hpp"
#include "train/metrics_sinks.hpp"
#include "train/progress_bar.hpp"
#include "train/step_metrics.hpp"

namespace dyncp::train {

class RunReporting {
 public:
  // Logs the run start and opens the sinks (rank 0). `run_id`: this launch's (rank 0; made at
  // start-up, when the save folder's lock names it).
  RunReporting(const config::ConfigContainer& config, dist::Comm& world, std::string run_id);

  const std::string& run_id() const { return run_id_; }
  // One finished step: every sink, and the console line when due. `finite` is false for a step
  // skipped on a non-finite loss or norm.
  void record(const StepMetrics& metrics, bool finite);
  void progress(std::int64_t iteration, double seconds_per_step) {
    progress_.update(iteration, seconds_per_step);
  }
  void clear_progress() { progress_.clear(); }
  // Every row is written: a sink may finish its work while the run saves (the W&B sidecar
  // logs the rest) ...
  void end_rows();
  // ... and is waited for at the very end.
  void finish();

 private:
  const config::ConfigContainer& config_;
  std::string run_id_;
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
  ProgressBar progress_;
  LogInterval log_interval_;
};

// Per-rank spread of a step, from one all-reduce (max) over the world: fastest and slowest step
// time and the largest peak resident set. (The straggler wait is timed at the step's barriers,
// train/step_engine.cpp.)
void add_rank_spread(StepMetrics& metrics, dist::Comm& world);

}  // namespace dyncp::train
