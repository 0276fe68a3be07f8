#include "train/checkpoint_resume.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <sstream>
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

std::optional<CheckpointChoice> choose_resume_checkpoint(const config::CheckpointConfig& checkpoint,
                                                         const SelectOptions& options) {
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
  auto choice = CheckpointStore::select(source, checkpoint.ckpt_step, options);
  if (!choice) {
    spdlog::warn("checkpoint.load: no checkpoint in '{}' yet; starting from the beginning", source);
  }
  return choice;
}

namespace {

// Rank 0's bytes to every rank.
std::string broadcast_text(dist::Comm& world, const std::string& text) {
  std::int64_t size = static_cast<std::int64_t>(text.size());
  world.broadcast(std::span<std::int64_t>(&size, 1), 0);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (world.rank() == 0) bytes.assign(text.begin(), text.end());
  world.broadcast(std::span<std::uint8_t>(bytes), 0);
  return {bytes.begin(), bytes.end()};
}

// "path bytes xxh3\n" per entry (paths are the writer's shards/rank_N.bin: no spaces).
std::string entries_text(const std::vector<ManifestEntry>& entries) {
  std::string text;
  for (const ManifestEntry& entry : entries)
    text += entry.path + " " + std::to_string(entry.bytes) + " " + entry.xxh3_64 + "\n";
  return text;
}

std::vector<ManifestEntry> parse_entries(const std::string& text) {
  std::vector<ManifestEntry> entries;
  std::istringstream in(text);
  ManifestEntry entry;
  while (in >> entry.path >> entry.bytes >> entry.xxh3_64) entries.push_back(entry);
  return entries;
}

}  // namespace

std::optional<CheckpointChoice> agree_on_resume_checkpoint(
    const config::CheckpointConfig& checkpoint, dist::Comm& world) {
  if (world.size() == 1) return choose_resume_checkpoint(checkpoint);
  SelectOptions options;
  std::vector<ManifestEntry> deferred;
  options.deferred = &deferred;
  while (true) {
    std::optional<CheckpointChoice> choice;
    if (world.rank() == 0) choice = choose_resume_checkpoint(checkpoint, options);
    // [iteration or -1], the path, the shards left to hash.
    std::int64_t iteration = choice ? choice->iteration : -1;
    world.broadcast(std::span<std::int64_t>(&iteration, 1), 0);
    if (iteration < 0) return std::nullopt;
    const fs::path folder = broadcast_text(world, choice ? choice->folder.string() : "");
    const std::vector<ManifestEntry> shards =
        parse_entries(broadcast_text(world, choice ? entries_text(deferred) : ""));
    // shards - (lowest failing shard), or 0: the max over ranks names the first failing shard.
    std::int64_t failure = 0;
    for (std::size_t i = static_cast<std::size_t>(world.rank()); i < shards.size();
         i += static_cast<std::size_t>(world.size())) {
      try {
        verify_manifest_file(folder, shards[i]);
      } catch (const core::Error& error) {
        if (error.kind() != core::ErrorKind::data) throw;
        spdlog::warn("rank {}: {}", world.rank(), error.what());
        failure = static_cast<std::int64_t>(shards.size() - i);
        break;
      }
    }
    world.all_reduce(&failure, &failure, 1, core::DType::i64, dist::ReduceOp::max);
    if (failure == 0) return CheckpointChoice{folder, iteration};
    const std::size_t first = shards.size() - static_cast<std::size_t>(failure);
    options.rejected.emplace_back(
        folder, (folder / shards[first].path).string() + " does not verify (rank " +
                    std::to_string(first % static_cast<std::size_t>(world.size())) +
                    " logged why)");
  }
}

}  // namespace dyncp::train
