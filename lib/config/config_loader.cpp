#include "config/config_loader.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/assignment.hpp"
#include "config/key_table.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace dyncp::config {

namespace {

using detail::Assignment;

struct KeyAssignment {
  const KeySpec* spec;
  Assignment assignment;
};

// Keyed by canonical path. Recipe entries naming the same key twice (e.g. through an alias)
// are a problem; an override replaces whatever came before it.
void merge(std::vector<Assignment> assignments, bool later_wins,
           std::map<std::string, KeyAssignment>& out, ProblemList& problems) {
  for (auto& assignment : assignments) {
    if (const auto* inert = find_inert_key(assignment.path)) {
      const auto value = canonical_scalar(assignment.value);
      if (std::find(inert->accepted.begin(), inert->accepted.end(), value) ==
          inert->accepted.end()) {
        std::string accepted;
        for (const auto& item : inert->accepted)
          accepted += (accepted.empty() ? "" : " or ") + item;
        problems.add(assignment.path + " (" + assignment.origin + ")",
                     describe_raw(assignment.value),
                     "asks for " + inert->feature +
                         ", which this program does not implement; "
                         "use " +
                         accepted + " (" + inert->meaning + ") or remove the key");
      }
      continue;
    }
    const KeySpec* spec = find_key(assignment.path);
    if (spec == nullptr) {
      problems.add_line(assignment.path + " (" + assignment.origin + "): unknown key" +
                        did_you_mean_key(assignment.path));
      continue;
    }
    const auto existing = out.find(spec->path);
    if (existing != out.end() && !later_wins) {
      problems.add_line(assignment.path + " (" + assignment.origin + "): " + spec->path +
                        " is already set at " + existing->second.assignment.origin +
                        "; keep one of them");
      continue;
    }
    out.insert_or_assign(spec->path, KeyAssignment{spec, std::move(assignment)});
  }
}

void apply(const KeyAssignment& entry, ConfigContainer& config, ProblemList& problems) {
  std::string error;
  const auto value = parse_value(*entry.spec, entry.assignment.value, error);
  if (!value) {
    problems.add(entry.assignment.path + " (" + entry.assignment.origin + ")",
                 describe_raw(entry.assignment.value), error);
    return;
  }
  entry.spec->set(config, *value);
}

// Hydra's override grammar on top of `key=value`:
//   +key=value   adds a key the recipe does not set (an error when it is set: use key=value)
//   ++key=value  sets it whether or not the recipe does
//   ~key         removes the recipe's setting, so the key takes its default; ~key=value removes
//                it only when the recipe's value is that value
void apply_override(const std::string& text, std::map<std::string, KeyAssignment>& assignments,
                    ProblemList& problems) {
  const std::string origin = "override '" + text + "'";
  if (!text.empty() && text.front() == '~') {
    const auto equals = text.find('=');
    const std::string path = text.substr(1, equals == std::string::npos ? equals : equals - 1);
    const KeySpec* spec = find_key(path);
    if (spec == nullptr) {
      problems.add_line(origin + ": unknown key" + did_you_mean_key(path));
      return;
    }
    const auto existing = assignments.find(spec->path);
    if (existing == assignments.end()) {
      problems.add_line(origin + ": " + spec->path +
                        " is not set by the recipe, so there is nothing to remove");
      return;
    }
    if (equals != std::string::npos) {
      const std::string expected = text.substr(equals + 1);
      const auto& set = existing->second.assignment.value;
      if (set.kind != RawValue::Kind::scalar || set.text != expected) {
        problems.add_line(origin + ": " + spec->path + " is " + describe_raw(set) + " at " +
                          existing->second.assignment.origin + ", not '" + expected + "'; write ~" +
                          path + " to remove it whatever its value");
        return;
      }
    }
    assignments.erase(existing);
    return;
  }
  const bool force_add = text.rfind("++", 0) == 0;
  const bool add = !force_add && text.rfind('+', 0) == 0;
  const std::string body = text.substr(force_add ? 2 : add ? 1 : 0);
  auto parsed = detail::parse_override(body, problems);
  if (!parsed) return;
  parsed->origin = origin;
  if (add) {
    const KeySpec* spec = find_key(parsed->path);
    const auto existing = spec ? assignments.find(spec->path) : assignments.end();
    if (existing != assignments.end()) {
      problems.add_line(origin + ": " + spec->path + " is already set at " +
                        existing->second.assignment.origin + "; write " + body + " (or ++" + body +
                        ") to change it");
      return;
    }
  }
  std::vector<Assignment> single;
  single.push_back(std::move(*parsed));
  merge(std::move(single), true, assignments, problems);
}

}  // namespace

ConfigContainer load_config_text(const std::string& yaml_text,
                                 const std::vector<std::string>& overrides,
                                 const std::string& source_name) {
  ProblemList problems;
  std::map<std::string, KeyAssignment> assignments;
  std::vector<std::string> inert_settings;
  merge(detail::read_yaml_assignments(yaml_text, source_name, problems, &inert_settings), false,
        assignments, problems);
  for (const auto& text : overrides) apply_override(text, assignments, problems);

  ConfigContainer config;
  config.bridge_inert_settings = std::move(inert_settings);
  // The checkpoint's config.json comes first so that explicit architecture keys override it.
  const auto hf_path = assignments.find("model.hf_model_path");
  if (hf_path != assignments.end()) {
    apply(hf_path->second, config, problems);
    if (!config.model.hf_model_path.empty()) {
      try {
        config.model.architecture = load_hf_model_config(config.model.hf_model_path);
      } catch (const core::Error& error) {
        problems.add("model.hf_model_path", config.model.hf_model_path,
                     std::string(error.what()) +
                         " (point it at an HF checkpoint folder with a "
                         "config.json, or remove it)");
      }
    }
  }
  for (const auto& [path, entry] : assignments) {
    if (path != "model.hf_model_path") apply(entry, config, problems);
  }
  problems.throw_if_any();
  return config;
}

ConfigContainer load_config_file(const std::string& path,
                                 const std::vector<std::string>& overrides) {
  // Not opened before it is known to be a regular file: opening a FIFO blocks.
  std::error_code error;
  if (!std::filesystem::exists(path, error) || std::filesystem::is_directory(path, error)) {
    core::throw_config_error(path,
                             "cannot read the recipe (missing or unreadable file; check "
                             "the --config path)");
  }
  // A FIFO or a device (/dev/zero) is refused before reading; the size bound is the YAML
  // reader's (4 MiB), checked before the text is allocated.
  return load_config_text(core::read_bounded_file(path, 4 << 20, "the recipe"), overrides, path);
}

}  // namespace dyncp::config
