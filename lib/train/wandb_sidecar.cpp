#include "train/wandb_sidecar.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "config/config_loader.hpp"
#include "core/error.hpp"

extern char** environ;

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// What a shell would need to run `argv` as written (for the by-hand command in messages).
std::string shell_words(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-./=:@+,") == std::string::npos;
    if (plain) {
      line += word;
      continue;
    }
    line += '\'';
    for (const char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

fs::path wandb_directory(const config::ConfigContainer& config) {
  if (!config.logger.wandb_save_dir.empty()) return config.logger.wandb_save_dir;
  if (!config.checkpoint.save.empty()) return fs::path(config.checkpoint.save) / "wandb";
  return fs::path(config.logger.metrics_path).parent_path() / "wandb";
}

std::string wandb_sidecar_program() {
  if (const char* program = std::getenv("DYNCP_WANDB_SIDECAR"); program && *program) return program;
  return std::string(DYNCP_SOURCE_DIR) + "/tools/wandb_sidecar.py";
}

std::vector<std::string> wandb_sidecar_command(const config::ConfigContainer& config,
                                               const std::string& run_id,
                                               const fs::path& config_file) {
  const auto& logger = config.logger;
  std::vector<std::string> argv = {wandb_sidecar_program(),
                                   logger.metrics_path,
                                   "--run-id",
                                   run_id,
                                   "--project",
                                   logger.wandb_project,
                                   "--name",
                                   logger.wandb_exp_name,
                                   "--dir",
                                   wandb_directory(config).string(),
                                   "--config",
                                   config_file.string()};
  if (!logger.wandb_entity.empty()) {
    argv.push_back("--entity");
    argv.push_back(logger.wandb_entity);
  }
  return argv;
}

WandbSidecar::WandbSidecar(const config::ConfigContainer& config, const std::string& run_id)
    : metrics_path_(config.logger.metrics_path) {
  if (config.logger.wandb_project.empty()) return;
  const fs::path folder = wandb_directory(config);
  fs::create_directories(folder);
  const fs::path config_file = folder / ("dyncp-" + run_id + ".yaml");
  {
    std::ofstream out(config_file, std::ios::binary | std::ios::trunc);
    out << config::dump_config_yaml(config);
    if (!out) {
      core::throw_config_error("logger.wandb_save_dir",
                               "cannot write " + config_file.string() + " (check the folder)");
    }
  }
  std::vector<std::string> argv = wandb_sidecar_command(config, run_id, config_file);
  resume_hint_ = shell_words(argv);
  argv.push_back("--follow");

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    core::throw_runtime_error(std::string("W&B sidecar: pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);  // dup2 clears CLOEXEC
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // Its own process group: a Ctrl-C meant for the job reaches the sidecar only through the
  // pipe closing, after the trainer has written its last row.
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> raw;
  for (std::string& word : argv) raw.push_back(word.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  const int failed = ::posix_spawn(&pid, raw[0], &actions, &attributes, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(fds[0]);
  if (failed != 0) {
    ::close(fds[1]);
    core::throw_config_error(
        "logger.wandb_project",
        "cannot start the W&B sidecar " + argv[0] + ": " + std::strerror(failed) +
            " (set DYNCP_WANDB_SIDECAR to tools/wandb_sidecar.py of a checkout, or unset "
            "logger.wandb_project)");
  }
  pid_ = pid;
  stdin_fd_ = fds[1];
  spdlog::info("W&B: sidecar pid {} logs {} to project {} as run '{}' (local files in {})", pid_,
               metrics_path_, config.logger.wandb_project, config.logger.wandb_exp_name,
               folder.string());
}

WandbSidecar::~WandbSidecar() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
}

void WandbSidecar::report_exit(int status) {
  pid_ = -1;
  spdlog::warn(
      "W&B sidecar ended early ({}; its message is above): training goes on and every row "
      "stays in {}; log them later with: {}",
      describe_status(status), metrics_path_, resume_hint_);
}

void WandbSidecar::check() {
  if (pid_ <= 0) return;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) report_exit(status);
}

void WandbSidecar::close_input() {
  if (stdin_fd_ < 0) return;
  ::close(stdin_fd_);
  stdin_fd_ = -1;
}

bool WandbSidecar::finish(std::chrono::seconds timeout) {
  close_input();
  if (pid_ <= 0) return false;
  spdlog::info("W&B: waiting for the sidecar to log the last rows (at most {} s)", timeout.count());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
      spdlog::warn("W&B sidecar ended with {}; every row is in {}; log them with: {}",
                   describe_status(status), metrics_path_, resume_hint_);
      return false;
    }
    if (done < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  spdlog::warn(
      "W&B sidecar (pid {}) still running after {} s: leaving it to finish on its own (a "
      "launcher may stop it); every row is in {}",
      pid_, timeout.count(), metrics_path_);
  pid_ = -1;
  return false;
}

}  // namespace dyncp::train
