#pragma once
// Checkpoints written before checkpoint manifests existed (checkpoint format 1): an iter_*
// folder with model/, optimizer.safetensors and a state.json {"format": 1, ...} holding the
// loop counters but no LR schedule, and no manifest.json.
//
// They have no checksums, so their contents cannot be verified; rather than strand a run
// saved by an older dyncp-train, such a folder is resumed after its structure checks out, with
// a warning: state.json passes the format-1 schema with the folder's iteration, model/
// config.json is a JSON object, and every safetensors file (model/ and optimizer.safetensors)
// has a valid header whose tensors fill exactly the bytes the file holds. A truncated or
// missing file or a damaged header is found (the folder is skipped like any unverifiable one);
// flipped bits inside tensor data are not. The LR schedule comes from the resuming run's
// settings. The next save writes format 2 with a manifest.

#include <cstdint>
#include <filesystem>

namespace dyncp::train {

// Whether `folder` is meant as a format-1 checkpoint: no manifest.json and a state.json (a
// small regular file) whose "format" is 1.
bool is_format1_checkpoint(const std::filesystem::path& folder);

// The structure checks above; throws a data error naming the first file that fails them.
void verify_format1_checkpoint(const std::filesystem::path& folder, std::int64_t iteration);

}  // namespace dyncp::train
