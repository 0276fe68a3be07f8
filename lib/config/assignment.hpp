#pragma once
// Internal to lib/config: one `key.path: value` as read from a recipe or an override, before
// it is checked against the key table.

#include <optional>
#include <string>
#include <vector>

#include "config/problem_list.hpp"
#include "config/value_parse.hpp"

namespace dyncp::config::detail {

struct Assignment {
  std::string path;
  RawValue value;
  std::string origin;  // "recipe.yaml:12:3" or "override 'a.b=c'"
};

// Flattens a YAML recipe into assignments. Throws a config error for unreadable YAML (with line
// and column) and an empty document; collects duplicate keys and misplaced sections in
// `problems`. A Megatron-Bridge dump (`_target_` markers) is translated by bridge_reader.cpp;
// its inert settings away from Bridge's defaults go to `inert_settings` when given.
std::vector<Assignment> read_yaml_assignments(const std::string& text,
                                              const std::string& source_name, ProblemList& problems,
                                              std::vector<std::string>* inert_settings = nullptr);

// `a.b.c=value`; a list value is written [x, y]. Malformed overrides go to `problems`.
std::optional<Assignment> parse_override(const std::string& text, ProblemList& problems);

}  // namespace dyncp::config::detail
