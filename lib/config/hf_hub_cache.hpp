#pragma once
// Hub names (`Org/Name`) resolved through the local Hugging Face cache, never downloaded.
// The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub; a repository lives in models--Org--Name/snapshots/<commit>, and
// refs/<revision> names the commit of a branch or tag (default: main).

#include <optional>
#include <string>
#include <vector>

namespace dyncp::config {

// True for `Org/Name` that is not an existing local path (one slash, no leading '.' or '/').
bool is_hub_name(const std::string& text);

struct HubLookup {
  std::optional<std::string> snapshot;  // the snapshot folder, when found
  std::vector<std::string> looked_in;   // every folder tried, for the error message
};

// `revision` empty: main. A revision is a ref name or a commit hash (a snapshot folder name).
HubLookup find_in_hf_cache(const std::string& repo_id, const std::string& revision);

// "Org/Name is not in the local Hugging Face cache (looked in ...); ...": the whole message.
std::string hub_not_found_message(const std::string& repo_id, const HubLookup& lookup);

}  // namespace dyncp::config
