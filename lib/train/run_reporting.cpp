#include "train/run_reporting.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "config/config_loader.hpp"
#include "core/output_file.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// Rank 0, before the first step: the run id and the resolved configuration, printed and saved
// beside the checkpoints (`<checkpoint.save>/config.yaml`, written through a rename).
void log_run_start(const config::ConfigContainer& config, const std::string& run_id) {
  const std::string yaml = config::dump_config_yaml(config);
  spdlog::info("run id {}; resolved configuration:\n{}", run_id, yaml);
  if (config.checkpoint.save.empty()) return;
  const fs::path folder(config.checkpoint.save);
  fs::create_directories(folder);
  const fs::path temporary = folder / ".config.yaml.tmp";
  core::OutputFile out(temporary);
  out.write("# dyncp-train run " + run_id + ": resolved configuration\n" + yaml);
  out.close();
  fs::rename(temporary, folder / "config.yaml");
}

}  // namespace

RunReporting::RunReporting(const config::ConfigContainer& config, dist::Comm& world,
                           std::string run_id)
    : config_(config),
      run_id_(std::move(run_id)),
      progress_(world.rank() == 0, config.train.train_iters) {
  if (world.rank() != 0) return;
  log_run_start(config, run_id_);
  sinks_ = open_metrics_sinks(config, run_id_);
}

void RunReporting::record(const StepMetrics& metrics, bool finite) {
  for (const auto& sink : sinks_) sink->write(metrics);
  log_interval_.add(metrics, /*skipped=*/!finite, /*nan=*/!finite);
  if (config_.logger.log_interval > 0 && metrics.iteration % config_.logger.log_interval == 0) {
    progress_.clear();
    spdlog::info("{}", format_console_line(metrics, log_interval_));
    log_interval_.reset();
  }
}

void RunReporting::end_rows() {
  for (const auto& sink : sinks_) sink->end_rows();
}

void RunReporting::finish() {
  for (const auto& sink : sinks_) sink->finish();
}

void add_rank_spread(StepMetrics& metrics, dist::Comm& world) {
  double values[3] = {metrics.elapsed_ms, -metrics.elapsed_ms,
                      static_cast<double>(peak_resident_bytes())};
  world.all_reduce(values, values, 3, core::DType::f64, dist::ReduceOp::max);
  metrics.elapsed_ms_max = values[0];
  metrics.elapsed_ms_min = -values[1];
  metrics.peak_memory_bytes = static_cast<std::int64_t>(values[2]);
}

}  // namespace dyncp::train
