#include "train/progress_bar.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace dyncp::train {

std::string format_duration(double seconds) {
  const auto total = static_cast<std::int64_t>(std::max(seconds, 0.0) + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, total % 3600 / 60);
  if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

namespace {

// OpenMPI gives every rank a pty as stdout even when mpirun's own output goes to a file, so
// under mpirun the terminal test says nothing: the bar stays off there unless forced.
bool wants_bar(bool is_rank_zero) {
  if (!is_rank_zero) return false;
  if (const char* forced = std::getenv("DYNCP_PROGRESS_BAR")) return forced[0] == '1';
  if (std::getenv("CI") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) return false;
  return isatty(STDOUT_FILENO) != 0;
}

}  // namespace

ProgressBar::ProgressBar(bool is_rank_zero, std::int64_t total_steps)
    : enabled_(wants_bar(is_rank_zero)), total_steps_(total_steps) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\n", stdout);
}

std::string ProgressBar::render(std::int64_t done, std::int64_t total, double seconds_per_step,
                                int width) {
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0)
                : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const double eta =
      static_cast<double>(std::max<std::int64_t>(total - done, 0)) * seconds_per_step;
  return fmt::format("[{}{}] {:>{}}/{}  {:3.0f}%  ETA {}", std::string(filled, '#'),
                     std::string(width - filled, '-'), done, std::to_string(total).size(), total,
                     100.0 * fraction, format_duration(eta));
}

void ProgressBar::update(std::int64_t done, double seconds_per_step) {
  if (!enabled_) return;
  std::fputs(("\r\033[K" + render(done, total_steps_, seconds_per_step)).c_str(), stdout);
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_) return;
  std::fputs("\r\033[K", stdout);
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace dyncp::train
