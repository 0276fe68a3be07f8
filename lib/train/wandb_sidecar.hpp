#pragma once
// Weights & Biases without a W&B client in this program: with logger.wandb_project set, rank 0
// starts tools/wandb_sidecar.py as a child process. The sidecar follows the metrics JSONL
// (logger.metrics_path), logs this run's rows to W&B and ends when its standard input, a pipe
// held by this process, closes: at the end of the run, or when the kernel closes it because the
// trainer died. Training never depends on it: a sidecar that stops early (no `wandb` package,
// no network) is a warning, and the JSONL still holds every row to log later by hand
// (docs/operations.md, "Weights & Biases").

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config_container.hpp"

namespace dyncp::train {

// logger.wandb_save_dir, else <checkpoint.save>/wandb (Megatron's default), else a `wandb`
// folder beside the metrics file.
std::filesystem::path wandb_directory(const config::ConfigContainer& config);

// The sidecar's executable: $DYNCP_WANDB_SIDECAR, else tools/wandb_sidecar.py of the source tree
// this binary was built from. Its `#!/usr/bin/env python3` line runs the python3 on PATH, the
// one that has `wandb` installed.
std::string wandb_sidecar_program();

// The sidecar's command line (program first) for this run; `config_file` is the resolved
// configuration the sidecar attaches to the W&B run.
std::vector<std::string> wandb_sidecar_command(const config::ConfigContainer& config,
                                               const std::string& run_id,
                                               const std::filesystem::path& config_file);

class WandbSidecar {
 public:
  // Starts nothing when logger.wandb_project is empty. Writes the resolved configuration into
  // wandb_directory(config) and starts the sidecar; a sidecar that cannot be started at all
  // (missing, not executable) is a configuration error naming DYNCP_WANDB_SIDECAR.
  WandbSidecar(const config::ConfigContainer& config, const std::string& run_id);
  // Closes the pipe without waiting: on an error path the sidecar logs what is there and ends
  // by itself.
  ~WandbSidecar();
  WandbSidecar(const WandbSidecar&) = delete;
  WandbSidecar& operator=(const WandbSidecar&) = delete;

  bool started() const { return pid_ > 0; }
  // A sidecar that ended before the run did is reported once, with its exit status.
  void check();
  // Every row is written: closes the sidecar's standard input, its signal to log the rest and
  // close the W&B run.
  void close_input();
  // close_input(), then waits up to `timeout` for the sidecar to end. Returns whether it ended
  // with status 0.
  bool finish(std::chrono::seconds timeout);

 private:
  void report_exit(int status);

  std::string metrics_path_;
  std::string resume_hint_;  // the by-hand command that logs what the sidecar did not
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
};

}  // namespace dyncp::train
