#include "train/output_folders.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "train/wandb_sidecar.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

void require_writable_folder(const std::string& key, const fs::path& folder) {
  const auto refuse = [&](const std::string& reason) {
    core::throw_config_error(key, "'" + folder.string() + "' is not writable (" + reason +
                                      "): fix its permissions or choose another folder");
  };
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) refuse("cannot create it: " + error.message());
  if (!fs::is_directory(folder, error)) refuse("not a folder");
  const fs::path probe = folder / (".dyncp_write_probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) refuse(std::strerror(errno));
  const char byte = 0;
  const bool written = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int write_error = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!written) refuse(std::strerror(write_error));
}

}  // namespace

void require_writable_outputs(const config::ConfigContainer& config) {
  if (!config.checkpoint.save.empty())
    require_writable_folder("checkpoint.save", config.checkpoint.save);
  if (!config.checkpoint.export_hf.empty())
    require_writable_folder("checkpoint.export_hf", config.checkpoint.export_hf);
  if (!config.logger.metrics_path.empty()) {
    const fs::path parent = fs::path(config.logger.metrics_path).parent_path();
    require_writable_folder("logger.metrics_path", parent.empty() ? fs::path(".") : parent);
  }
  if (!config.logger.wandb_project.empty())
    require_writable_folder("logger.wandb_save_dir", wandb_directory(config));
  if (!config.logger.tensorboard_dir.empty())
    require_writable_folder("logger.tensorboard_dir", config.logger.tensorboard_dir);
  if (config.dataset.type != config::DatasetType::mock_varlen && !config.dataset.cache_dir.empty())
    require_writable_folder("dataset.cache_dir", config.dataset.cache_dir);
}

}  // namespace dyncp::train
