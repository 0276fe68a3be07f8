#pragma once
// Where checkpoints live on disk and how they get there safely.
//
//   <save_dir>/iter_0000042/...      one folder per saved iteration, with its manifest.json
//   <save_dir>/latest                text file holding the newest complete folder's name
//
// A save writes into a hidden temporary folder, fsyncs, writes the manifest (sizes and
// checksums of every file, train/checkpoint_manifest.hpp) last, then renames the folder into
// place and only then updates `latest` (itself written to a temporary file and renamed). A
// crash or a full disk at any point leaves the previous checkpoint complete and `latest`
// pointing at it. After a successful save, pruning keeps the newest `keep_last` folders among
// those not newer than the one just written: the new checkpoint and anything newer (left by an
// earlier run in the same folder) are never removed.
//
// Choosing a checkpoint to load (select): `latest` must hold the plain name of a sibling
// iter_* folder whose manifest verifies; otherwise (missing, empty, pointing elsewhere, or the
// folder fails verification) the newest iter_* folder that verifies is used, with a warning;
// if iter_* folders or `latest` exist but none verifies, that is a data error (exit 2). A
// folder from before manifests (format 1) counts as verifying when its structure checks out
// (train/format1_checkpoint.hpp); choosing one logs a warning saying what was not verified.
//
// Every file of a checkpoint is written through core::OutputFile (checked writes, fsync on
// close), so a full disk or a file-size limit anywhere fails the save (tests inject ENOSPC with
// DYNCP_FAULT_ENOSPC_AFTER_BYTES, core/output_file.hpp).

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint_manifest.hpp"

namespace dyncp::train {

// A verified checkpoint folder and its iteration.
struct CheckpointChoice {
  std::filesystem::path folder;
  std::int64_t iteration = 0;
  // Written before manifests: checked for structure only (train/format1_checkpoint.hpp).
  bool format1 = false;
};

// How select() verifies, for a caller that shares the work over ranks.
struct SelectOptions {
  // Set: the shards of a sharded checkpoint are checked for size only; the chosen folder's
  // shard entries are left here for the caller to hash (checkpoint_manifest.hpp).
  std::vector<ManifestEntry>* deferred = nullptr;
  // Folders found damaged by such a check, with the reason: never chosen.
  std::vector<std::pair<std::filesystem::path, std::string>> rejected;
};

class CheckpointStore {
 public:
  CheckpointStore(std::filesystem::path save_dir, int keep_last);

  // Begin a save: returns the temporary folder to write into.
  std::filesystem::path begin(std::int64_t iteration);
  // Publish the folder returned by begin(): write its manifest (files in `known` listed as
  // given, the others hashed), rename into place, update `latest`, prune.
  std::filesystem::path commit(std::int64_t iteration,
                               const std::vector<ManifestEntry>& known = {});
  // Drop a failed save's temporary folder (never touches published checkpoints).
  void abandon(std::int64_t iteration) noexcept;

  // The checkpoint to resume from under `dir` by the rules above, or exactly iteration `step`
  // when given (which must exist and verify); nullopt when `dir` holds no checkpoint at all.
  static std::optional<CheckpointChoice> select(const std::filesystem::path& dir,
                                                std::optional<std::int64_t> step = std::nullopt,
                                                const SelectOptions& options = {});
  // Whether `dir` holds anything a run could resume from or overwrite: `latest` or iter_*.
  static bool holds_checkpoints(const std::filesystem::path& dir);
  // Iterations of the iter_* folders under `dir`, ascending.
  static std::vector<std::int64_t> saved_iterations(const std::filesystem::path& dir);
  static std::string folder_name(std::int64_t iteration);
  // The hidden folder begin() makes for `iteration` under `save_dir` (ranks that write into
  // it without owning the store find it here).
  static std::filesystem::path temporary_folder(const std::filesystem::path& save_dir,
                                                std::int64_t iteration);

 private:
  std::filesystem::path temporary_folder(std::int64_t iteration) const {
    return temporary_folder(save_dir_, iteration);
  }
  void prune(std::int64_t written_iteration) const;

  std::filesystem::path save_dir_;
  int keep_last_;
};

}  // namespace dyncp::train
