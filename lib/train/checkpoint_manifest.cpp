#include "train/checkpoint_manifest.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json_text_check.hpp"
#include "core/output_file.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr int manifest_format = 1;
// A manifest lists a handful of files; anything larger is not one.
constexpr std::uintmax_t max_manifest_bytes = 1 << 20;

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

FileDigest digest_file(const fs::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    core::throw_data_error(path.string(), std::string("cannot open: ") + std::strerror(errno));
  }
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                        &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buffer(std::size_t{4} << 20);
  FileDigest digest;
  while (true) {
    const std::size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
    if (got > 0) {
      XXH3_64bits_update(state.get(), buffer.data(), got);
      digest.bytes += got;
    }
    if (got < buffer.size()) break;
  }
  if (std::ferror(file.get())) {
    core::throw_data_error(path.string(), std::string("read failed: ") + std::strerror(errno));
  }
  digest.xxh3 = XXH3_64bits_digest(state.get());
  return digest;
}

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// A listed path must stay inside the folder: relative, no "..", no empty parts.
bool safe_relative_path(const std::string& text) {
  if (text.empty() || text.front() == '/') return false;
  for (const auto& part : fs::path(text)) {
    if (part == ".." || part == "." || part.empty()) return false;
  }
  return true;
}

}  // namespace

std::string xxh3_hex(std::uint64_t value) {
  return hex64(value);
}

void write_checkpoint_manifest(const fs::path& folder, std::int64_t iteration,
                               const std::vector<ManifestEntry>& known) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    const std::string relative = fs::relative(entry.path(), folder).generic_string();
    if (relative != checkpoint_manifest_name) files.push_back(relative);
  }
  std::sort(files.begin(), files.end());
  nlohmann::json listed = nlohmann::json::array();
  for (const std::string& relative : files) {
    const auto given = std::find_if(known.begin(), known.end(), [&](const ManifestEntry& entry) {
      return entry.path == relative;
    });
    if (given != known.end()) {
      listed.push_back({{"path", relative}, {"bytes", given->bytes}, {"xxh3_64", given->xxh3_64}});
      continue;
    }
    const FileDigest digest = digest_file(folder / relative);
    listed.push_back(
        {{"path", relative}, {"bytes", digest.bytes}, {"xxh3_64", hex64(digest.xxh3)}});
  }
  const nlohmann::json manifest = {
      {"format", manifest_format}, {"iteration", iteration}, {"files", listed}};
  const std::string text = manifest.dump(1) + "\n";
  core::OutputFile file(folder / checkpoint_manifest_name);
  file.write(text);
  file.close();
}

void verify_manifest_file(const fs::path& folder, const ManifestEntry& file, bool checksum) {
  const fs::path listed = folder / file.path;
  std::error_code error;
  if (!fs::is_regular_file(fs::symlink_status(listed, error))) {
    core::throw_data_error(listed.string(), "listed in the manifest but missing (or not a file)");
  }
  const std::uintmax_t size = fs::file_size(listed, error);
  if (size != file.bytes) {
    core::throw_data_error(listed.string(), std::to_string(size) + " bytes, the manifest says " +
                                                std::to_string(file.bytes) +
                                                " (truncated or replaced)");
  }
  if (!checksum) return;
  const FileDigest digest = digest_file(listed);
  if (hex64(digest.xxh3) != file.xxh3_64) {
    core::throw_data_error(listed.string(), "checksum " + hex64(digest.xxh3) +
                                                " differs from the manifest's " + file.xxh3_64 +
                                                " (the file was damaged or changed after the "
                                                "save)");
  }
}

std::int64_t verify_checkpoint_manifest(const fs::path& folder,
                                        std::vector<ManifestEntry>* deferred) {
  const fs::path path = folder / checkpoint_manifest_name;
  const std::string where = path.string();
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    core::throw_data_error(where,
                           "missing: not a complete checkpoint (the manifest is written last)");
  }
  if (fs::file_size(path, error) > max_manifest_bytes) {
    core::throw_data_error(where, "larger than 1 MiB: not a checkpoint manifest");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  const Manifest manifest = parse_checkpoint_manifest(text, where);
  for (const ManifestEntry& file : manifest.files) {
    const bool defer = deferred != nullptr && file.path.rfind("shards/", 0) == 0;
    verify_manifest_file(folder, file, !defer);
    if (defer) deferred->push_back(file);
  }
  return manifest.iteration;
}

Manifest parse_checkpoint_manifest(const std::string& text, const std::string& where) {
  core::check_json_text(text, where);
  const nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    core::throw_data_error(where, "not a JSON object: the manifest is damaged");
  }
  const auto field = [&](const char* name) -> const nlohmann::json& {
    if (!manifest.contains(name)) core::throw_data_error(where, std::string("no \"") + name + "\"");
    return manifest[name];
  };
  if (field("format") != manifest_format) {
    core::throw_data_error(where, "manifest format " + field("format").dump() +
                                      " is not the supported " + std::to_string(manifest_format));
  }
  const nlohmann::json& iteration = field("iteration");
  if (!iteration.is_number_integer() || iteration.get<std::int64_t>() < 0) {
    core::throw_data_error(where,
                           "\"iteration\" " + iteration.dump() + " is not a non-negative integer");
  }
  const nlohmann::json& files = field("files");
  if (!files.is_array() || files.empty()) core::throw_data_error(where, "\"files\" is not a list");
  Manifest parsed;
  parsed.iteration = iteration.get<std::int64_t>();
  for (const nlohmann::json& file : files) {
    if (!file.is_object() || !file.contains("path") || !file["path"].is_string() ||
        !file.contains("bytes") || !file["bytes"].is_number_unsigned() ||
        !file.contains("xxh3_64") || !file["xxh3_64"].is_string()) {
      core::throw_data_error(where, "malformed entry " + file.dump() +
                                        " (expected {\"path\", \"bytes\", \"xxh3_64\"})");
    }
    ManifestEntry entry{file["path"].get<std::string>(), file["bytes"].get<std::uint64_t>(),
                        file["xxh3_64"].get<std::string>()};
    if (!safe_relative_path(entry.path)) {
      core::throw_data_error(where, "entry path '" + entry.path + "' leaves the checkpoint folder");
    }
    parsed.files.push_back(std::move(entry));
  }
  return parsed;
}

}  // namespace dyncp::train
