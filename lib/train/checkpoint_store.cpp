#include "train/checkpoint_store.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/format1_checkpoint.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_io_error(const fs::path& path, const std::string& what, int error) {
  core::throw_runtime_error("checkpoint: " + what + " '" + path.string() +
                            "' failed: " + std::strerror(error));
}

// "iter_0000042" -> 42; nullopt for any other name.
std::optional<std::int64_t> folder_iteration(const std::string& name) {
  constexpr std::string_view prefix = "iter_";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 ||
      name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  std::int64_t value = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    value = value * 10 + (name[i] - '0');
  }
  return value;
}

// The first line of `latest`, read without trusting the file: a FIFO or a huge file is refused.
std::optional<std::string> read_latest_name(const fs::path& path, std::string& problem) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    problem = "missing";
    return std::nullopt;
  }
  if (!fs::is_regular_file(status) || fs::file_size(path, error) > 4096) {
    problem = "not a small regular file";
    return std::nullopt;
  }
  std::ifstream in(path);
  std::string name;
  std::getline(in, name);
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) {
    problem = "empty";
    return std::nullopt;
  }
  return name;
}

// The iteration `folder` verifies as: by its manifest, or for a format-1 folder by its
// structure (the folder's own iteration, which the format-1 state.json must match).
CheckpointChoice verify_folder(const fs::path& folder, std::int64_t folder_iteration,
                               const SelectOptions& options) {
  if (options.deferred) options.deferred->clear();
  for (const auto& [rejected, reason] : options.rejected) {
    if (rejected == folder) core::throw_data_error(folder.string(), reason);
  }
  if (is_format1_checkpoint(folder)) {
    verify_format1_checkpoint(folder, folder_iteration);
    return CheckpointChoice{folder, folder_iteration, true};
  }
  // A folder that fails leaves nothing deferred behind.
  std::vector<ManifestEntry> deferred;
  const std::int64_t iteration =
      verify_checkpoint_manifest(folder, options.deferred ? &deferred : nullptr);
  if (options.deferred) options.deferred->assign(deferred.begin(), deferred.end());
  return CheckpointChoice{folder, iteration};
}

void warn_if_format1(const CheckpointChoice& choice) {
  if (!choice.format1) return;
  spdlog::warn(
      "{}: a format-1 checkpoint (written before checkpoint manifests): its files and headers "
      "check out, but without checksums its tensor data cannot be verified; resuming it with "
      "the LR schedule of this run's settings. The next save writes a verified checkpoint",
      choice.folder.string());
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;  // best effort for directories on filesystems that refuse it
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path save_dir, int keep_last)
    : save_dir_(std::move(save_dir)), keep_last_(keep_last) {}

std::string CheckpointStore::folder_name(std::int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(iteration));
  return name;
}

fs::path CheckpointStore::temporary_folder(const fs::path& save_dir, std::int64_t iteration) {
  return save_dir / (".tmp_" + folder_name(iteration));
}

fs::path CheckpointStore::begin(std::int64_t iteration) {
  std::error_code error;
  fs::create_directories(save_dir_, error);
  if (error) throw_io_error(save_dir_, "creating", error.value());
  const fs::path folder = temporary_folder(iteration);
  fs::remove_all(folder, error);  // leftovers of an earlier crashed save
  fs::create_directories(folder, error);
  if (error) throw_io_error(folder, "creating", error.value());
  return folder;
}

fs::path CheckpointStore::commit(std::int64_t iteration, const std::vector<ManifestEntry>& known) {
  const fs::path folder = temporary_folder(iteration);
  const fs::path final_folder = save_dir_ / folder_name(iteration);
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_directory()) fsync_path(entry.path());
  }
  // Last, so a folder with a manifest is complete; the rename below publishes both at once.
  write_checkpoint_manifest(folder, iteration, known);
  fsync_path(folder);
  std::error_code error;
  fs::remove_all(final_folder, error);  // re-saving the same iteration replaces it
  fs::rename(folder, final_folder, error);
  if (error) throw_io_error(final_folder, "renaming into", error.value());

  const fs::path latest_tmp = save_dir_ / ".latest.tmp";
  {
    core::OutputFile latest(latest_tmp);
    const std::string name = folder_name(iteration) + "\n";
    latest.write(name.data(), name.size());
    latest.close();
  }
  fs::rename(latest_tmp, save_dir_ / "latest", error);
  if (error) throw_io_error(save_dir_ / "latest", "renaming into", error.value());
  fsync_path(save_dir_);
  prune(iteration);
  return final_folder;
}

void CheckpointStore::abandon(std::int64_t iteration) noexcept {
  std::error_code ignored;
  fs::remove_all(temporary_folder(iteration), ignored);
  fs::remove(save_dir_ / ".latest.tmp", ignored);
}

void CheckpointStore::prune(std::int64_t written_iteration) const {
  if (keep_last_ <= 0) return;
  std::vector<std::int64_t> candidates;
  for (const std::int64_t iteration : saved_iterations(save_dir_)) {
    if (iteration <= written_iteration) candidates.push_back(iteration);  // never newer ones
  }
  const auto excess = static_cast<std::ptrdiff_t>(candidates.size()) - keep_last_;
  for (std::ptrdiff_t i = 0; i < excess; ++i) {
    std::error_code ignored;
    fs::remove_all(save_dir_ / folder_name(candidates[static_cast<std::size_t>(i)]), ignored);
  }
}

std::vector<std::int64_t> CheckpointStore::saved_iterations(const fs::path& dir) {
  std::vector<std::int64_t> iterations;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return iterations;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const auto iteration = folder_iteration(entry.path().filename().string());
    if (iteration && entry.is_directory()) iterations.push_back(*iteration);
  }
  std::sort(iterations.begin(), iterations.end());
  return iterations;
}

bool CheckpointStore::holds_checkpoints(const fs::path& dir) {
  std::error_code error;
  return fs::exists(fs::symlink_status(dir / "latest", error)) || !saved_iterations(dir).empty();
}

std::optional<CheckpointChoice> CheckpointStore::select(const fs::path& dir,
                                                        std::optional<std::int64_t> step,
                                                        const SelectOptions& options) {
  if (step) {
    const fs::path folder = dir / folder_name(*step);
    if (!fs::is_directory(folder)) {
      core::throw_config_error("checkpoint.ckpt_step",
                               std::to_string(*step) + ": no folder '" + folder.string() + "'");
    }
    const CheckpointChoice choice = verify_folder(folder, *step, options);
    if (choice.iteration != *step) {
      core::throw_data_error((folder / checkpoint_manifest_name).string(),
                             "records iteration " + std::to_string(choice.iteration) + ", not " +
                                 std::to_string(*step));
    }
    warn_if_format1(choice);
    return choice;
  }

  std::vector<std::string> problems;
  const auto verified = [&](const fs::path& folder,
                            std::int64_t expected) -> std::optional<CheckpointChoice> {
    try {
      const CheckpointChoice choice = verify_folder(folder, expected, options);
      if (choice.iteration == expected) return choice;
      problems.push_back(folder.string() + ": its manifest records iteration " +
                         std::to_string(choice.iteration));
    } catch (const core::Error& error) {
      if (error.kind() != core::ErrorKind::data) throw;
      problems.push_back(error.what());
    }
    return std::nullopt;
  };

  const fs::path latest_path = dir / "latest";
  std::string problem;
  if (const auto name = read_latest_name(latest_path, problem)) {
    const auto iteration = folder_iteration(*name);
    if (!iteration) {
      problem = "names '" + *name + "', which is not an iter_* folder of " + dir.string();
    } else if (!fs::is_directory(dir / *name)) {
      problem = "names '" + *name + "', which does not exist";
    } else if (auto choice = verified(dir / *name, *iteration)) {
      warn_if_format1(*choice);
      return choice;
    } else {
      problem = "names '" + *name + "', which does not verify: " + problems.back();
    }
  }
  const std::vector<std::int64_t> iterations = saved_iterations(dir);
  if (iterations.empty() && problem == "missing") return std::nullopt;
  for (auto it = iterations.rbegin(); it != iterations.rend(); ++it) {
    if (auto choice = verified(dir / folder_name(*it), *it)) {
      spdlog::warn("{}: {}; using the newest checkpoint that verifies, {}", latest_path.string(),
                   problem, choice->folder.string());
      warn_if_format1(*choice);
      return choice;
    }
  }
  std::string message = "no checkpoint here verifies (latest: " + problem + ")";
  for (const std::string& reason : problems) message += "; " + reason;
  core::throw_data_error(
      dir.string(),
      message +
          ". Restore or remove the damaged folders, or start elsewhere (another "
          "checkpoint.save, or checkpoint.overwrite=true with checkpoint.load unset)");
}

}  // namespace dyncp::train
