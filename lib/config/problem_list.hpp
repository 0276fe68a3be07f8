#pragma once
// Collects every configuration problem before failing, so one run shows the user all of them.
// Each line reads `key.path: value: rule (how to fix)`.

#include <string>
#include <vector>

#include "core/error.hpp"

namespace dyncp::config {

class ProblemList {
 public:
  void add(const std::string& key_path, const std::string& value, const std::string& rule) {
    lines_.push_back(key_path + ": " + value + ": " + rule);
  }
  void add_line(std::string line) { lines_.push_back(std::move(line)); }

  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // One config error listing every problem, one per line.
  void throw_if_any(const std::string& context = "invalid configuration") const {
    if (lines_.empty()) return;
    std::string message = context + " (" + std::to_string(lines_.size()) +
                          (lines_.size() == 1 ? " problem):" : " problems):");
    for (const auto& line : lines_) message += "\n  " + line;
    throw core::Error(core::ErrorKind::config, "", message);
  }

 private:
  std::vector<std::string> lines_;
};

}  // namespace dyncp::config
