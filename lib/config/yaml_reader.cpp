// Recipes meet yaml-cpp here (and in bridge_reader.cpp, for Megatron-Bridge dumps): YAML text ->
// flat `key.path -> RawValue` assignments.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "config/assignment.hpp"
#include "config/bridge_reader.hpp"
#include "config/key_table.hpp"
#include "core/error.hpp"

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

// Bounds on what a recipe may expand to. yaml-cpp shares aliased nodes, but walking them expands
// every alias: a 452-byte "billion laughs" recipe would become gigabytes of values. Real recipes
// have a few hundred nodes and nest < 10 levels.
constexpr std::size_t max_yaml_nodes = 100000;
constexpr int max_yaml_depth = 64;
constexpr std::size_t max_yaml_key_length = 256;
constexpr std::size_t max_recipe_bytes = 4 << 20;

// The line of a document marker ("---" or "..." at column 0) that has content both before and
// after it, i.e. the start of a second document; 0 when there is none. (Found by scanning:
// yaml-cpp's LoadAll can loop forever on some malformed input, and Load reads only the first
// document.) A marker at column 0 can only be a marker: block scalars are indented.
std::int64_t second_document_line(const std::string& text) {
  const auto is_marker = [](std::string_view line) {
    return (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
           (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
  };
  const auto has_content = [](std::string_view line) {
    const auto first = line.find_first_not_of(" \t\r");
    return first != std::string_view::npos && line[first] != '#';
  };
  bool content_before = false;
  std::int64_t marker_line = 0;
  std::int64_t number = 0;
  for (std::size_t begin = 0; begin <= text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    const std::string_view line(text.data() + begin, end - begin);
    ++number;
    if (is_marker(line)) {
      if (content_before && marker_line == 0) marker_line = number;
      // Content on the marker line itself ("--- a: 1") belongs to the new document.
      if (marker_line != 0 && has_content(line.substr(3))) return marker_line;
      if (!content_before && has_content(line.substr(3))) content_before = true;
    } else if (has_content(line)) {
      if (marker_line != 0) return marker_line;
      content_before = true;
    }
    begin = end + 1;
  }
  return 0;
}

struct YamlBudget {
  std::string source;
  std::size_t nodes = 0;

  void walk(const YAML::Node& node, int depth) {
    visit(node, depth);
    if (node.IsMap()) {
      for (const auto& entry : node) {
        walk(entry.first, depth + 1);
        walk(entry.second, depth + 1);
      }
    } else if (node.IsSequence()) {
      for (const auto& item : node) walk(item, depth + 1);
    }
  }

  void visit(const YAML::Node& node, int depth) {
    if (++nodes > max_yaml_nodes) {
      core::throw_config_error(location(source, node.Mark()),
                               "the recipe expands to more than " + std::to_string(max_yaml_nodes) +
                                   " values (aliases that repeat aliases?); no recipe needs this");
    }
    if (depth > max_yaml_depth) {
      core::throw_config_error(location(source, node.Mark()),
                               "nested deeper than " + std::to_string(max_yaml_depth) + " levels");
    }
    // "?" = no tag (plain), "!" = a quoted scalar; any explicit tag would be silently dropped.
    if (node.Tag() != "?" && node.Tag() != "!" && !node.Tag().empty()) {
      core::throw_config_error(location(source, node.Mark()),
                               "YAML tag '" + node.Tag() +
                                   "' is not supported (values are read by their key's type); "
                                   "remove the tag");
    }
  }
};

RawValue to_raw(const YAML::Node& node, YamlBudget& budget, int depth) {
  budget.visit(node, depth);
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
      for (const auto& item : node) raw.items.push_back(to_raw(item, budget, depth + 1));
      break;
    case YAML::NodeType::Map:
      raw.kind = RawValue::Kind::map;
      break;
  }
  return raw;
}

void flatten(const YAML::Node& map, const std::string& prefix, const std::string& source,
             std::vector<Assignment>& out, ProblemList& problems, YamlBudget& budget, int depth) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    const YAML::Node& value = entry.second;
    const std::string where = location(source, key_node.Mark());
    budget.visit(key_node, depth + 1);
    if (!key_node.IsScalar()) {
      problems.add_line(where + ": a key must be a plain name");
      continue;
    }
    const std::string key = key_node.Scalar();
    if (key.size() > max_yaml_key_length) {
      core::throw_config_error(where, "a key of " + std::to_string(key.size()) +
                                          " characters; key names are at most " +
                                          std::to_string(max_yaml_key_length));
    }
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
      budget.visit(value, depth + 1);
      flatten(value, path + ".", source, out, problems, budget, depth + 1);
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
    out.push_back({path, to_raw(value, budget, depth + 1), where});
  }
}

}  // namespace

std::vector<Assignment> read_yaml_assignments(const std::string& text,
                                              const std::string& source_name, ProblemList& problems,
                                              std::vector<std::string>* inert_settings) {
  if (text.size() > max_recipe_bytes) {
    core::throw_config_error(source_name, "the recipe is " + std::to_string(text.size()) +
                                              " bytes; recipes are at most 4 MiB");
  }
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    const auto line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    core::throw_config_error(source_name + ":" + std::to_string(line),
                             "NUL byte in the recipe (a damaged or binary file)");
  }
  if (const std::int64_t line = second_document_line(text); line > 0) {
    core::throw_config_error(source_name + ":" + std::to_string(line),
                             "a second YAML document ('---'); a recipe is one document, and "
                             "the rest would be ignored: merge or remove it");
  }
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
  {
    // Every node, aliases expanded, before any reader walks the tree (the Bridge-dump reader
    // included): bounded size and depth, no tags.
    YamlBudget whole_tree{source_name};
    whole_tree.walk(root, 0);
  }
  if (is_bridge_dump(root)) {
    std::vector<std::string> ignored;
    return read_bridge_assignments(root, source_name, problems,
                                   inert_settings != nullptr ? *inert_settings : ignored);
  }
  std::vector<Assignment> out;
  YamlBudget budget{source_name};
  flatten(root, "", source_name, out, problems, budget, 0);
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
      YamlBudget budget{origin};
      assignment.value = to_raw(YAML::Load(value), budget, 0);
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
