#pragma once
// The key table: every configuration key declared once, with its path, type, default,
// one-line meaning, the rules that involve it, accepted aliases and accessors into
// ConfigContainer. The loader, the resolved-config dump, the frozen key-list test and
// docs/config.md are all driven by this table.

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "config/config_container.hpp"

namespace dyncp::config {

enum class KeyType { boolean, integer, number, string, choice, integer_list, choice_list };

// A typed value; std::monostate means null (an unset optional key).
using KeyValue = std::variant<std::monostate, bool, std::int64_t, double, std::string,
                              std::vector<std::int64_t>, std::vector<std::string>>;

struct KeySpec {
  std::string path;
  KeyType type = KeyType::string;
  bool nullable = false;
  std::vector<std::string> choices;  // choice and choice_list
  std::int64_t min_integer = 0;      // integer and integer_list
  std::int64_t max_integer = 0;
  std::string doc;
  std::string rules;                 // human-readable rules that involve the key ("" if none)
  std::vector<std::string> aliases;  // full paths accepted as the same key
  std::string unbuilt_feature;       // non-empty: a non-default value needs this unbuilt feature
  std::function<KeyValue(const ConfigContainer&)> get;
  std::function<void(ConfigContainer&, const KeyValue&)> set;
};

// Keys that real Megatron-Bridge recipes carry and that change nothing here: accepted with a
// value that matches what this program does, rejected (naming the feature) otherwise.
struct InertKey {
  std::string path;
  std::vector<std::string> accepted;  // canonical spellings: true/false, null, numbers, names
  std::string meaning;                // what the accepted value means here
  std::string feature;                // what other values would ask for
};

const std::vector<KeySpec>& key_table();
const std::vector<InertKey>& inert_keys();

// Lookup by canonical path or alias; nullptr when unknown.
const KeySpec* find_key(const std::string& path);
const InertKey* find_inert_key(const std::string& path);

std::string type_name(const KeySpec& spec);       // "integer >= 1", "one of [a, b]", ...
std::string format_value(const KeyValue& value);  // as it would be written in YAML

// Every key path and alias, for did-you-mean suggestions.
std::vector<std::string> all_key_names();

}  // namespace dyncp::config
