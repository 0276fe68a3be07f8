#include "train/metrics_sinks.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include "train/tensorboard_writer.hpp"
#include "train/wandb_sidecar.hpp"

namespace dyncp::train {

namespace {

class JsonlSink final : public MetricsSink {
 public:
  explicit JsonlSink(const std::string& path) : writer_(path) {}
  void write(const StepMetrics& metrics) override { writer_.write(metrics); }

 private:
  MetricsWriter writer_;
};

class TensorBoardSink final : public MetricsSink {
 public:
  explicit TensorBoardSink(const std::string& directory) : writer_(directory) {
    spdlog::info("TensorBoard events: {}", writer_.path());
  }
  void write(const StepMetrics& metrics) override { writer_.write(metrics); }

 private:
  TensorBoardWriter writer_;
};

class WandbSink final : public MetricsSink {
 public:
  WandbSink(const config::ConfigContainer& config, const std::string& run_id)
      : sidecar_(config, run_id) {}
  void write(const StepMetrics&) override { sidecar_.check(); }  // it reads the JSONL itself
  void end_rows() override { sidecar_.close_input(); }
  void finish() override { sidecar_.finish(std::chrono::seconds(120)); }

 private:
  WandbSidecar sidecar_;
};

struct SinkEntry {
  // Whether the config asks for the sink.
  bool (*wanted)(const config::ConfigContainer& config);
  std::unique_ptr<MetricsSink> (*open)(const config::ConfigContainer& config,
                                       const std::string& run_id);
};

// One entry per sink; a new sink is one more line here.
const SinkEntry sink_table[] = {
    {[](const config::ConfigContainer& c) { return !c.logger.metrics_path.empty(); },
     [](const config::ConfigContainer& c, const std::string&) -> std::unique_ptr<MetricsSink> {
       return std::make_unique<JsonlSink>(c.logger.metrics_path);
     }},
    {[](const config::ConfigContainer& c) { return !c.logger.tensorboard_dir.empty(); },
     [](const config::ConfigContainer& c, const std::string&) -> std::unique_ptr<MetricsSink> {
       return std::make_unique<TensorBoardSink>(c.logger.tensorboard_dir);
     }},
    {[](const config::ConfigContainer& c) { return !c.logger.wandb_project.empty(); },
     [](const config::ConfigContainer& c, const std::string& run_id)
         -> std::unique_ptr<MetricsSink> { return std::make_unique<WandbSink>(c, run_id); }},
};

}  // namespace

std::vector<std::unique_ptr<MetricsSink>> open_metrics_sinks(const config::ConfigContainer& config,
                                                             const std::string& run_id) {
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  for (const SinkEntry& entry : sink_table)
    if (entry.wanted(config)) sinks.push_back(entry.open(config, run_id));
  return sinks;
}

}  // namespace dyncp::train
