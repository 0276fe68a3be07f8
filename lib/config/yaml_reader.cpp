// Recipes meet yaml-cpp here (and in bridge_reader.cpp, for Megatron-Bridge dumps): YAML text ->
// flat `key.path -> RawValue` assignments.

#include <yaml-cpp/yaml.h>

#include <set>

#include "config/assignment.hpp"
#include "config/bridge_reader.hpp"
#include "config/key_table.hpp"

namespace dyncp::config::detail {

namespace {

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// True when `path` is a section (a strict prefix of some key path).
bool is_section(const std::string& path) {
  const std::string prefix = path + ".";
  for (const auto& name : all_key_names()) {
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

RawValue to_raw(const YAML::Node& node) {
  RawValue raw;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      raw.kind = RawValue::Kind::null;
      break;
    case YAML::NodeType::Scalar:
      raw.kind = RawValue::Kind::scalar;
      raw.text = node.Scalar();
      raw.quoted = node.Tag() == "!";  // yaml-cpp tags quoted scalars "!"
      break;
    case YAML::NodeType::Sequence:
      raw.kind = RawValue::Kind::list;
      for (const auto& item : node) raw.items.push_back(to_raw(item));
      break;
    case YAML::NodeType::Map:
      raw.kind = RawValue::Kind::map;
      break;
  }
  return raw;
}

void flatten(const YAML::Node& map, const std::string& prefix, const std::string& source,
             std::vector<Assignment>& out, ProblemList& problems) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    const YAML::Node& value = entry.second;
    const std::string where = location(source, key_node.Mark());
    if (!key_node.IsScalar()) {
      problems.add_line(where + ": a key must be a plain name");
      continue;
    }
    const std::string key = key_node.Scalar();
    if (!seen.insert(key).second) {
      problems.add_line(prefix + key + " (" + where +
                        "): duplicate key: each key may appear once "
                        "in a mapping; remove one of them");
      continue;
    }
    std::string path = prefix + key;
    // HF's nested text_config (Qwen3.5) holds the same fields as the flat model section.
    if (path == "model.text_config") path = "model";
    if (value.IsMap() && find_key(path) == nullptr && find_inert_key(path) == nullptr) {
      flatten(value, path + ".", source, out, problems);
      continue;
    }
    if (value.IsNull() && is_section(path) && find_key(path) == nullptr) {
      continue;  // an empty section (`validation:` with everything commented out)
    }
    if (!value.IsMap() && is_section(path) && find_key(path) == nullptr) {
      problems.add_line(path + " (" + where + "): is a section; expected a mapping of " + path +
                        ".* keys");
      continue;
    }
    out.push_back({path, to_raw(value), where});
  }
}

}  // namespace

std::vector<Assignment> read_yaml_assignments(const std::string& text,
                                              const std::string& source_name, ProblemList& problems,
                                              std::vector<std::string>* inert_settings) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& error) {
    core::throw_config_error(location(source_name, error.mark), "YAML syntax error: " + error.msg +
                                                                    " (fix the recipe at this line "
                                                                    "and column)");
  }
  if (root.IsNull() || !root.IsDefined()) {
    core::throw_config_error(source_name,
                             "the recipe is empty; it needs at least the model, dataset and train "
                             "sections (see configs/ for examples)");
  }
  if (!root.IsMap()) {
    core::throw_config_error(source_name,
                             "the recipe must be a YAML mapping of sections (model:, dataset:, "
                             "...), not a " +
                                 std::string(root.IsSequence() ? "list" : "single value"));
  }
  if (is_bridge_dump(root)) {
    std::vector<std::string> ignored;
    return read_bridge_assignments(root, source_name, problems,
                                   inert_settings != nullptr ? *inert_settings : ignored);
  }
  std::vector<Assignment> out;
  flatten(root, "", source_name, out, problems);
  return out;
}

std::optional<Assignment> parse_override(const std::string& text, ProblemList& problems) {
  const std::string origin = "override '" + text + "'";
  const auto equals = text.find('=');
  if (equals == std::string::npos) {
    problems.add_line(origin + ": has no '='; write key.path=value (e.g. train.train_iters=10)");
    return std::nullopt;
  }
  Assignment assignment;
  assignment.path = text.substr(0, equals);
  assignment.origin = origin;
  if (assignment.path.empty()) {
    problems.add_line(origin + ": names no key; write key.path=value");
    return std::nullopt;
  }
  const std::string value = text.substr(equals + 1);
  if (!value.empty() && value.front() == '[') {
    try {
      assignment.value = to_raw(YAML::Load(value));
    } catch (const YAML::Exception& error) {
      problems.add_line(origin + ": the list value is not valid ([a, b, ...]): " + error.msg);
      return std::nullopt;
    }
  } else if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
             value.back() == value.front()) {
    assignment.value = {RawValue::Kind::scalar, value.substr(1, value.size() - 2), true, {}};
  } else {
    // Taken verbatim (not through YAML) so paths with ':' or '#' stay intact.
    assignment.value = {RawValue::Kind::scalar, value, false, {}};
  }
  return assignment;
}

}  // namespace dyncp::config::detail
