#include "train/format1_checkpoint.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text_check.hpp"
#include "model/safetensors.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/loop_state.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t max_state_bytes = 64 * 1024;
constexpr std::uintmax_t max_config_bytes = 1024 * 1024;

// The file's tensors must end exactly where its data ends: the writer leaves no gap or tail,
// so anything else is a truncated or overwritten file.
void check_safetensors_structure(const std::string& path) {
  const model::SafetensorsFile file(path);
  std::uint64_t end = 0;
  for (const model::StoredTensorInfo& tensor : file.header().tensors)
    end = std::max<std::uint64_t>(end, tensor.data_end);
  if (end != file.header().data_bytes) {
    core::throw_data_error(path, "tensors end at byte " + std::to_string(end) +
                                     " of a data buffer of " +
                                     std::to_string(file.header().data_bytes) + " bytes");
  }
}

}  // namespace

bool is_format1_checkpoint(const fs::path& folder) {
  std::error_code error;
  if (fs::exists(fs::symlink_status(folder / checkpoint_manifest_name, error))) return false;
  const fs::path state = folder / "state.json";
  if (!fs::is_regular_file(state, error) || fs::file_size(state, error) > max_state_bytes)
    return false;
  const std::string text = core::read_bounded_file(state, max_state_bytes, "loop state");
  core::check_json_text(text, state.string());  // NUL bytes or deep nesting: a data error
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  return json.is_object() && json.contains("format") && json["format"] == 1;
}

void verify_format1_checkpoint(const fs::path& folder, std::int64_t iteration) {
  const fs::path state = folder / "state.json";
  parse_format1_loop_state(core::read_bounded_file(state, max_state_bytes, "loop state"),
                           state.string(), iteration);

  const fs::path config = folder / "model" / "config.json";
  const std::string text = core::read_bounded_file(config, max_config_bytes, "model config");
  core::check_json_text(text, config.string());
  if (!nlohmann::json::parse(text, nullptr, false).is_object())
    core::throw_data_error(config.string(), "not a JSON object");

  const fs::path model = folder / "model";
  const fs::path index = model / "model.safetensors.index.json";
  if (fs::exists(index)) {
    // Sharded: every shard the index names (SafetensorsCheckpoint checks the index itself).
    const model::SafetensorsCheckpoint checkpoint(model.string());
    std::set<std::string> shards;
    for (const std::string& name : checkpoint.tensor_names())
      shards.insert(checkpoint.file_of(name));
    for (const std::string& shard : shards) check_safetensors_structure(shard);
  } else {
    check_safetensors_structure((model / "model.safetensors").string());
  }
  check_safetensors_structure((folder / "optimizer.safetensors").string());
}

}  // namespace dyncp::train
