#include "train/checkpoint_resume.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code error;
  return fs::weakly_canonical(a, error) == fs::weakly_canonical(b, error);
}

std::string iteration_list(const std::string& dir) {
  std::string text;
  for (const std::int64_t iteration : CheckpointStore::saved_iterations(dir)) {
    if (!text.empty()) text += ", ";
    text += CheckpointStore::folder_name(iteration);
  }
  return text.empty() ? "a latest file" : text;
}

}  // namespace

std::optional<CheckpointChoice> choose_resume_checkpoint(
    const config::CheckpointConfig& checkpoint) {
  const bool save_holds =
      !checkpoint.save.empty() && CheckpointStore::holds_checkpoints(checkpoint.save);
  const bool resumes_from_save = checkpoint.load.empty()
                                     ? !checkpoint.overwrite
                                     : same_folder(checkpoint.load, checkpoint.save);
  if (save_holds && !resumes_from_save && !checkpoint.overwrite) {
    core::throw_config_error(
        "checkpoint.save",
        checkpoint.save + " already holds checkpoints (" + iteration_list(checkpoint.save) +
            ") and this run loads from " + checkpoint.load +
            ": its saves would mix with them. Resume from it (leave checkpoint.load unset or set "
            "it to the same folder), save elsewhere, or set checkpoint.overwrite=true");
  }
  std::string source = checkpoint.load;
  if (source.empty() && save_holds) {
    if (checkpoint.overwrite) {
      spdlog::warn(
          "checkpoint.overwrite: starting from the beginning although {} holds checkpoints ({}); "
          "they are pruned with this run's own (never one newer than this run's newest), and "
          "latest names this run's newest",
          checkpoint.save, iteration_list(checkpoint.save));
      return std::nullopt;
    }
    source = checkpoint.save;
    spdlog::info("checkpoint.load is unset and checkpoint.save holds checkpoints: resuming from {}",
                 source);
  }
  if (source.empty()) {
    if (checkpoint.ckpt_step) {
      core::throw_config_error("checkpoint.ckpt_step", std::to_string(*checkpoint.ckpt_step) +
                                                           ": " + checkpoint.save +
                                                           " holds no checkpoint to pick from");
    }
    return std::nullopt;
  }
  auto choice = CheckpointStore::select(source, checkpoint.ckpt_step);
  if (!choice) {
    spdlog::warn("checkpoint.load: no checkpoint in '{}' yet; starting from the beginning", source);
  }
  return choice;
}

std::optional<CheckpointChoice> agree_on_resume_checkpoint(
    const config::CheckpointConfig& checkpoint, dist::Comm& world) {
  std::optional<CheckpointChoice> choice;
  if (world.rank() == 0) choice = choose_resume_checkpoint(checkpoint);
  if (world.size() == 1) return choice;
  // [iteration or -1, path length], then the path's bytes.
  std::vector<std::int64_t> header = {
      choice ? choice->iteration : -1,
      choice ? static_cast<std::int64_t>(choice->folder.string().size()) : 0};
  world.broadcast(std::span<std::int64_t>(header), 0);
  if (header[0] < 0) return std::nullopt;
  std::vector<std::uint8_t> path(static_cast<std::size_t>(header[1]));
  if (world.rank() == 0) {
    const std::string text = choice->folder.string();
    path.assign(text.begin(), text.end());
  }
  world.broadcast(std::span<std::uint8_t>(path), 0);
  return CheckpointChoice{fs::path(std::string(path.begin(), path.end())), header[0]};
}

}  // namespace dyncp::train
