#pragma once
// Where each step's metrics go, as one extension point: every sink is one entry in the table
// of metrics_sinks.cpp (its config key and a factory). Rank 0 opens the sinks whose key is set;
// RunReporting hands each one every step and tells it when the rows end and when the run ends.
//
//   logger.metrics_path     JSONL, one row per step (train::MetricsWriter)
//   logger.tensorboard_dir  TensorBoard event file (train::TensorBoardWriter)
//   logger.wandb_project    the W&B sidecar following the JSONL file (train::WandbSidecar)

#include <memory>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "train/step_metrics.hpp"

namespace dyncp::train {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write(const StepMetrics& metrics) = 0;
  // Every row is written (the run goes on to save and export).
  virtual void end_rows() {}
  // The run is over: the last chance to wait for what the sink still does.
  virtual void finish() {}
};

// The sinks the config asks for, in the table's order (a sink may follow the output of an
// earlier one: the sidecar reads the JSONL file). Only rank 0 calls this.
std::vector<std::unique_ptr<MetricsSink>> open_metrics_sinks(const config::ConfigContainer& config,
                                                             const std::string& run_id);

}  // namespace dyncp::train
