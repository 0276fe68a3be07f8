#pragma once
// Text-level values (from a YAML file or a key=value override) converted to a key's type, with
// messages that name the expected type. Free of yaml-cpp so overrides and tests share it.

#include <optional>
#include <string>
#include <vector>

#include "config/key_table.hpp"

namespace dyncp::config {

struct RawValue {
  enum class Kind { null, scalar, list, map };
  Kind kind = Kind::null;
  std::string text;             // scalar text
  bool quoted = false;          // a quoted scalar is always a string, never null or a boolean
  std::vector<RawValue> items;  // list items
};

// The value as the user wrote it, for messages.
std::string describe_raw(const RawValue& value);

// Convert to the key's type. On failure returns nullopt and sets `error` to the rule broken
// ("expected an integer >= 1", "overflows a 64-bit integer", ...).
std::optional<KeyValue> parse_value(const KeySpec& spec, const RawValue& value, std::string& error);

// Canonical spelling of a scalar for comparison with InertKey::accepted.
std::string canonical_scalar(const RawValue& value);

// The closest of `candidates` to `word` when it is plausibly a typo; empty otherwise.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean model.seq_length?" for an unknown key path, or empty.
std::string did_you_mean_key(const std::string& unknown_path);

}  // namespace dyncp::config
