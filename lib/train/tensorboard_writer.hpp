#pragma once
// TensorBoard event files from the step metrics (logger.tensorboard_dir; rank 0): one file
// `events.out.tfevents.<seconds>.<host>.<pid>.dyncp` per run, TFRecord-framed `Event` protobufs
// (tensorflow/core/util/event.proto) encoded by hand, flushed after every step so a killed job
// keeps them. Scalars use Megatron's tag names where it has them:
//
//   lm loss, learning-rate, grad-norm, batch-size, lm loss validation (evaluation steps),
//   throughput/tokens_per_s, throughput/tflops_per_device, memory/peak_mib,
//   time/step_ms, time/straggler_wait_ms, and the histogram cp-group-size (every group of the
//   step at its size).

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include "train/step_metrics.hpp"

namespace dyncp::train {

// The encoded protobuf messages, exposed for tests.
namespace tensorboard {
std::string scalar_value(const std::string& tag, float value);
std::string histogram_value(const std::string& tag, const std::map<int, int>& counts_by_value);
// Event{wall_time, step, summary{values}}; `values` are concatenated Summary.Value fields.
std::string summary_event(double wall_time, std::int64_t step, const std::string& values);
std::string file_version_event(double wall_time);
}  // namespace tensorboard

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& directory);  // empty: writes nothing
  void write(const StepMetrics& metrics);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace dyncp::train
