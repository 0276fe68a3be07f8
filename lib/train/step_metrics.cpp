#include "train/step_metrics.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dyncp::train {

std::string format_group_histogram(const std::map<int, int>& group_sizes) {
  std::string out;
  for (const auto& [size, count] : group_sizes) {
    if (!out.empty()) out += ' ';
    out += fmt::format("cp{}:{}", size, count);
  }
  return out;
}

std::string format_console_line(const StepMetrics& m) {
  const auto& t = m.time;
  return fmt::format(
             "iter {}/{} | samples {} | {:.1f} ms | lr {:.3e} | loss {:.5f} | grad norm {:.4f} | "
             "{:.0f} tok/s | {:.2f} TFLOP/s/dev | mb {} | {} | skipped {} | "
             "data {:.0f} sched {:.1f} compute {:.0f} cp {:.0f} ep {:.0f} sync {:.0f} opt {:.0f} "
             "ms",
             m.iteration, m.train_iters, m.consumed_samples, m.elapsed_ms, m.lr, m.loss,
             m.grad_norm, m.tokens_per_s, m.tflops_per_device, m.microbatches,
             format_group_histogram(m.group_sizes), m.skipped_samples, t.data_ms, t.schedule_ms,
             t.compute_ms, t.cp_comm_ms, t.ep_comm_ms, t.grad_sync_ms, t.optimizer_ms) +
         (m.validation_loss ? fmt::format(" | validation loss {:.5f}", *m.validation_loss) : "");
}

std::string to_json_line(const StepMetrics& m) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [size, count] : m.group_sizes) groups[std::to_string(size)] = count;
  nlohmann::json line = {
      {"iteration", m.iteration},
      {"consumed_samples", m.consumed_samples},
      {"loss", m.loss},
      {"grad_norm", m.grad_norm},
      {"lr", m.lr},
      {"loss_tokens", m.loss_tokens},
      {"real_tokens", m.real_tokens},
      {"padded_tokens", m.padded_tokens},
      {"tokens_per_s", m.tokens_per_s},
      {"tflops_per_device", m.tflops_per_device},
      {"microbatches", m.microbatches},
      {"group_sizes", groups},
      {"comm_bytes", m.comm_bytes},
      {"skipped_samples", m.skipped_samples},
      {"skipped_steps", m.skipped_steps},
      {"elapsed_ms", m.elapsed_ms},
      {"time_ms",
       {{"data", m.time.data_ms},
        {"schedule", m.time.schedule_ms},
        {"compute", m.time.compute_ms},
        {"cp_comm", m.time.cp_comm_ms},
        {"ep_comm", m.time.ep_comm_ms},
        {"grad_sync", m.time.grad_sync_ms},
        {"optimizer", m.time.optimizer_ms}}},
  };
  if (m.validation_loss) line["validation_loss"] = *m.validation_loss;
  return line.dump();
}

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  out_.open(path, std::ios::app);
  if (!out_)
    core::throw_config_error("logger.metrics_path", "cannot open '" + path + "' for writing");
}

void MetricsWriter::write(const StepMetrics& metrics) {
  if (!out_.is_open()) return;
  out_ << to_json_line(metrics) << '\n';
  out_.flush();
}

}  // namespace dyncp::train
