// The modelled step as the dry run prints it: the op table, a line per collective with the part
// hidden behind compute, the step and the MFU.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "packing/step_model.hpp"

namespace dyncp::packing {

namespace {

std::string scaled(double value, const char* unit) {
  static const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int index = 0;
  while (std::fabs(value) >= 999.5 && index < 6) {  // %.3g would print 1e+03
    value /= 1000.0;
    ++index;
  }
  char buffer[32];
  if (value == 0.0) {
    std::snprintf(buffer, sizeof buffer, "-");
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3g%s%s", value, prefixes[index], unit);
  }
  return buffer;
}

std::string ms(double seconds) {
  char buffer[32];
  const double value = seconds * 1e3;
  std::snprintf(buffer, sizeof buffer,
                value >= 100  ? "%.0f ms"
                : value >= 10 ? "%.1f ms"
                              : "%.2f ms",
                value);
  return buffer;
}

std::string serial_text(const StepOpRow& row) {
  if (row.serial_steps == 0 && row.launches == 0) return "-";
  std::ostringstream out;
  char buffer[64];
  if (row.serial_steps > 0) {
    std::snprintf(buffer, sizeof buffer, "%.0f x %.2g us", row.serial_steps,
                  row.step_latency_seconds * 1e6);
    out << buffer;
    if (row.launches > 0) out << " + ";
  }
  if (row.launches > 0) {
    const bool one = row.launches == 1.0;
    std::snprintf(
        buffer, sizeof buffer, "%.0f %s", row.launches,
        is_communication(row.op) ? (one ? "call" : "calls") : (one ? "launch" : "launches"));
    out << buffer;
  }
  return out.str();
}

}  // namespace

std::string format_step_model(const StepModel& model, const StepModelParameters& p) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %10s %10s  %-30s %10s %10s %10s %6s  %s\n", "op class",
                "FLOPs", "bytes", "serial depth", "roofline", "serial", "time", "share", "bound");
  out << line;
  for (const StepOpRow& row : model.rows) {
    const double roofline = std::max(row.compute_seconds, row.memory_seconds);
    const double share =
        model.step_seconds > 0 ? 100.0 * row.exposed_seconds() / model.step_seconds : 0;
    std::snprintf(line, sizeof line, "  %-16s %10s %10s  %-30s %10s %10s %10s %5.1f%%  %s\n",
                  step_op_class_name(row.op), scaled(row.flops, "").c_str(),
                  scaled(row.bytes, "B").c_str(), serial_text(row).c_str(), ms(roofline).c_str(),
                  ms(row.latency_seconds).c_str(), ms(row.seconds()).c_str(), share,
                  row.seconds() > 0 ? row.bound() : "-");
    out << line;
  }
  // Per collective (at the line start, so that no table reader takes one for a row).
  for (const StepOpRow& row : model.rows) {
    if (!is_communication(row.op)) continue;
    std::snprintf(line, sizeof line,
                  "overlap:     %-16s %10s modelled, %10s hidden behind compute, %10s exposed\n",
                  step_op_class_name(row.op), ms(row.seconds()).c_str(),
                  ms(row.hidden_seconds).c_str(), ms(row.exposed_seconds()).c_str());
    out << line;
  }
  std::snprintf(
      line, sizeof line,
      "  modelled step:   %s over %lld microbatches, %.0f tokens/s (%.0f per GPU), "
      "%.3g model TFLOP/s per GPU\n",
      ms(model.step_seconds).c_str(), static_cast<long long>(model.microbatches),
      model.tokens_per_second,
      model.tokens_per_second / static_cast<double>(std::max<std::int64_t>(model.ranks, 1)),
      model.model_flops_per_second_per_rank / 1e12);
  out << line;
  std::snprintf(line, sizeof line,
                "  modelled MFU:    %.1f%% of the table's bf16 peak (%.0f TFLOP/s), %.1f%% of the "
                "%.0f TFLOP/s datasheet figure\n",
                100.0 * model.mfu, p.bf16_flops_per_second / 1e12, 100.0 * model.mfu_of_datasheet,
                kH200DatasheetBf16FlopsPerSecond / 1e12);
  out << line;
  return out.str();
}

}  // namespace dyncp::packing
