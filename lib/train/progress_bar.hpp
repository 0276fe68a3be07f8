#pragma once
// A one-line progress bar with ETA for interactive runs: rank 0 only, and only when stdout is a
// terminal and CI is unset (logs and CI output never see carriage returns). Under mpirun every
// rank's stdout is a pty whatever mpirun's own output is, so there it is off;
// DYNCP_PROGRESS_BAR=1 (or 0) forces it on (off). The bar lives on
// stdout; console metric lines go to stderr through spdlog, so the bar is cleared before one
// is printed and redrawn after it.
//
//   [##########----------]  75/150  50%  ETA 1m02s

#include <cstdint>
#include <string>

namespace dyncp::train {

// `45s`, `1m02s`, `3h07m`: the ETA's spelling in the bar and the console line.
std::string format_duration(double seconds);

class ProgressBar {
 public:
  ProgressBar(bool is_rank_zero, std::int64_t total_steps);
  ~ProgressBar();

  bool enabled() const { return enabled_; }
  // After step `done` of the run; `seconds_per_step` from the run so far.
  void update(std::int64_t done, double seconds_per_step);
  void clear();

  // The text of the bar, for tests: width in characters of the [###---] part.
  static std::string render(std::int64_t done, std::int64_t total, double seconds_per_step,
                            int width = 30);

 private:
  bool enabled_;
  std::int64_t total_steps_;
  bool drawn_ = false;
};

}  // namespace dyncp::train
