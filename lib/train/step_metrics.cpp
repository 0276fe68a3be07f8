#include "train/step_metrics.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "train/progress_bar.hpp"

namespace dyncp::train {

void LogInterval::add(const StepMetrics& metrics, bool skipped, bool nan) {
  ++steps_;
  elapsed_ms_sum_ += metrics.elapsed_ms;
  skipped_ += skipped ? 1 : 0;
  nan_ += nan ? 1 : 0;
}

std::string format_group_histogram(const std::map<int, int>& group_sizes) {
  std::string out;
  for (const auto& [size, count] : group_sizes) {
    if (!out.empty()) out += ' ';
    out += fmt::format("cp{}:{}", size, count);
  }
  return out;
}

// Megatron's training_log() field names and number formats, then what dynamic CP adds.
std::string format_console_line(const StepMetrics& m, const LogInterval& interval) {
  const auto& t = m.time;
  constexpr double mebibyte = 1024.0 * 1024.0;
  return fmt::format(
             "iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration "
             "(ms): {:.1f} | learning rate: {:.6E} | global batch size: {:>5} | lm loss: {:.6E} | "
             "grad norm: {:.3f} | number of skipped iterations: {:>3} | number of nan "
             "iterations: {:>3} | dropped samples: {} | tokens/s: {:.0f} | TFLOP/s/device: {:.2f} "
             "| ETA: {} | peak memory (MiB): {:.1f} | step time min/max (ms): {:.1f}/{:.1f} | "
             "microbatches: {} | {} | time (ms): data {:.0f} sched {:.1f} compute {:.0f} cp {:.0f} "
             "ep {:.0f} tp {:.0f} wait {:.0f} sync {:.0f} opt {:.0f}",
             m.iteration, m.train_iters, m.consumed_samples, interval.mean_elapsed_ms(), m.lr,
             m.global_batch_size, m.loss, m.grad_norm, interval.skipped_iterations(),
             interval.nan_iterations(), m.dropped_samples, m.tokens_per_s, m.tflops_per_device,
             format_duration(m.eta_seconds), static_cast<double>(m.peak_memory_bytes) / mebibyte,
             m.elapsed_ms_min, m.elapsed_ms_max, m.microbatches,
             format_group_histogram(m.group_sizes), t.data_ms, t.schedule_ms, t.compute_ms,
             t.cp_comm_ms, t.ep_comm_ms, t.tp_comm_ms, t.straggler_wait_ms, t.grad_sync_ms,
             t.optimizer_ms) +
         (m.validation_loss ? fmt::format(" | validation loss: {:.6E}", *m.validation_loss) : "");
}

std::string to_json_line(const StepMetrics& m) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [size, count] : m.group_sizes) groups[std::to_string(size)] = count;
  nlohmann::json line = {
      {"run_id", m.run_id},
      {"iteration", m.iteration},
      {"consumed_samples", m.consumed_samples},
      {"loss", m.loss},
      {"grad_norm", m.grad_norm},
      {"lr", m.lr},
      {"global_batch_size", m.global_batch_size},
      {"loss_tokens", m.loss_tokens},
      {"real_tokens", m.real_tokens},
      {"padded_tokens", m.padded_tokens},
      {"tokens_per_s", m.tokens_per_s},
      {"tflops_per_device", m.tflops_per_device},
      {"microbatches", m.microbatches},
      {"group_sizes", groups},
      {"comm_bytes", m.comm_bytes},
      {"dropped_samples", m.dropped_samples},
      {"skipped_steps", m.skipped_steps},
      {"elapsed_ms", m.elapsed_ms},
      {"elapsed_ms_min", m.elapsed_ms_min},
      {"elapsed_ms_max", m.elapsed_ms_max},
      {"eta_s", m.eta_seconds},
      {"peak_memory_bytes", m.peak_memory_bytes},
      {"time_ms",
       {{"data", m.time.data_ms},
        {"schedule", m.time.schedule_ms},
        {"compute", m.time.compute_ms},
        {"cp_comm", m.time.cp_comm_ms},
        {"ep_comm", m.time.ep_comm_ms},
        {"tp_comm", m.time.tp_comm_ms},
        {"straggler_wait", m.time.straggler_wait_ms},
        {"grad_sync", m.time.grad_sync_ms},
        {"optimizer", m.time.optimizer_ms}}},
  };
  if (m.validation_loss) line["validation_loss"] = *m.validation_loss;
  return line.dump();
}

std::int64_t peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string make_run_id() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const auto salt = (static_cast<std::uint64_t>(getpid()) * 0x9E3779B97F4A7C15ULL) ^
                    static_cast<std::uint64_t>(nanoseconds);
  return fmt::format("{:04}{:02}{:02}-{:02}{:02}{:02}-{:06x}", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, salt & 0xffffff);
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  out_.open(path, std::ios::app);
  if (!out_)
    core::throw_config_error("logger.metrics_path", "cannot open '" + path + "' for writing");
}

bool MetricsWriter::write(const StepMetrics& metrics) {
  if (!out_.is_open()) return true;
  errno = 0;
  out_ << to_json_line(metrics) << '\n';
  out_.flush();
  if (out_) return true;
  spdlog::warn("logger.metrics_path: writing iteration {} to '{}' failed ({}); that line is lost",
               metrics.iteration, path_, errno != 0 ? std::strerror(errno) : "write error");
  out_.clear();
  return false;
}

}  // namespace dyncp::train
