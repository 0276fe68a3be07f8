#pragma once
// The integrity record of one checkpoint folder: `manifest.json`, written last (after every
// other file is complete and fsynced, before the folder is published), listing every file with
// its size and XXH3-64 checksum:
//
//   {"format": 1, "iteration": 40,
//    "files": [{"path": "model/config.json", "bytes": 812, "xxh3_64": "9f0c..."}, ...]}
//
// A folder is a checkpoint only if its manifest verifies: every listed file exists, is a
// regular file, and has the listed size and checksum, and the iteration matches the folder's
// name. Flipped bits, a zeroed block, a truncated or replaced file and an edited state.json all
// fail verification with a data error naming the file.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dyncp::train {

inline constexpr const char* checkpoint_manifest_name = "manifest.json";

struct ManifestEntry {
  std::string path;  // relative to the checkpoint folder, never leaving it
  std::uint64_t bytes = 0;
  std::string xxh3_64;  // 16 lowercase hex digits
};

// Hashes every regular file under `folder` (recursively, manifest excluded) and writes the
// manifest through core::OutputFile (fsynced; ENOSPC and fault injection surface as errors).
// Files listed in `known` are listed as given, not read again (a sharded checkpoint's rank
// files, hashed by their writers as they were written).
void write_checkpoint_manifest(const std::filesystem::path& folder, std::int64_t iteration,
                               const std::vector<ManifestEntry>& known = {});

// 16 lowercase hex digits, as manifests write an XXH3-64 value.
std::string xxh3_hex(std::uint64_t value);
struct Manifest {
  std::int64_t iteration = 0;
  std::vector<ManifestEntry> files;
};

// Parses and schema-checks manifest text (`where` names the file in errors).
Manifest parse_checkpoint_manifest(const std::string& text, const std::string& where);

// Verifies `folder` against its manifest; returns the manifest's iteration. Throws a data error
// naming the first file that does not match. With `deferred`, the files of a sharded
// checkpoint's shards/ folder are checked for presence and size only and their entries are
// appended to *deferred: the loading ranks hash them in parallel (train/checkpoint_resume.hpp).
std::int64_t verify_checkpoint_manifest(const std::filesystem::path& folder,
                                        std::vector<ManifestEntry>* deferred = nullptr);

// One listed file: present, of the listed size and (with `checksum`) hash; throws a data error
// naming it.
void verify_manifest_file(const std::filesystem::path& folder, const ManifestEntry& file,
                          bool checksum = true);

}  // namespace dyncp::train
