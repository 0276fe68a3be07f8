#include "config/hf_hub_cache.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace dyncp::config {

namespace fs = std::filesystem;

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string cache_root() {
  if (const auto hub = environment("HF_HUB_CACHE"); !hub.empty()) return hub;
  if (const auto home = environment("HF_HOME"); !home.empty()) return home + "/hub";
  if (const auto xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) {
    return xdg + "/huggingface/hub";
  }
  return environment("HOME") + "/.cache/huggingface/hub";
}

}  // namespace

bool is_hub_name(const std::string& text) {
  if (text.empty() || text.front() == '/' || text.front() == '.' || text.front() == '~') {
    return false;
  }
  const auto slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size()) return false;
  if (text.find('/', slash + 1) != std::string::npos) return false;
  std::error_code error;
  return !fs::exists(text, error);
}

HubLookup find_in_hf_cache(const std::string& repo_id, const std::string& revision) {
  HubLookup lookup;
  std::string folder_name = "models--" + repo_id;
  for (std::size_t at = folder_name.find('/'); at != std::string::npos;
       at = folder_name.find('/', at)) {
    folder_name.replace(at, 1, "--");
  }
  const fs::path repo = fs::path(cache_root()) / folder_name;
  const std::string wanted = revision.empty() ? "main" : revision;
  std::string commit = wanted;
  const fs::path ref = repo / "refs" / wanted;
  std::error_code error;
  lookup.looked_in.push_back(ref.string());
  if (fs::is_regular_file(ref, error)) {
    std::ifstream in(ref);
    std::getline(in, commit);
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  lookup.looked_in.push_back(snapshot.string());
  if (fs::is_directory(snapshot, error)) lookup.snapshot = snapshot.string();
  return lookup;
}

std::string hub_not_found_message(const std::string& repo_id, const HubLookup& lookup) {
  std::string looked;
  for (const auto& path : lookup.looked_in) looked += (looked.empty() ? "" : ", ") + path;
  const auto offline = environment("HF_HUB_OFFLINE");
  return repo_id + " is not in the local Hugging Face cache (looked in " + looked +
         "; the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub" +
         (offline.empty() ? "" : ", HF_HUB_OFFLINE=" + offline) +
         "); nothing is downloaded: fetch it into the cache beforehand (huggingface-cli download " +
         repo_id + ") or give the local checkpoint folder instead";
}

}  // namespace dyncp::config
