#pragma once
// Every field of Megatron-Bridge's ConfigContainer sections in each Bridge release read
// (tools/bridge/extract_bridge_fields.py writes bridge_fields.inc from the megatron-bridge and
// megatron-core sources of several releases, with the releases that declare each field), and
// the classification of each one: honoured (mapped to this program's key), inert (a performance
// or infrastructure knob: accepted, one summary warning when it is at no release's default) or
// refused (changes the math or the layout and is not built: any value but the supported ones
// exits 2).

#include <string>
#include <string_view>
#include <vector>

namespace dyncp::config {

struct BridgeField {
  std::string_view section;     // "model", "dataset", "dataset.preprocessing", ...
  std::string_view class_name;  // the dataclass that declares it
  std::string_view name;
  std::string_view type;           // the Python annotation
  std::string_view default_value;  // as a dump spells it; "<required>" / "<computed>" if none
  std::string_view releases;       // labels of the releases declaring it so, space-separated
  std::string path() const { return std::string(section) + "." + std::string(name); }
  bool in_release(std::string_view label) const;
};

// A release the table was generated from: its label ("0.6.2", "main", ...) and what its
// sources were (package versions, commits).
struct BridgeRelease {
  std::string_view label;
  std::string_view sources;
};

// The label of the dynamic-CP fields of Megatron-Bridge PR #6127, which no release read has.
inline constexpr std::string_view bridge_dynamic_cp_label = "pr6127";

// Oldest first; the last numbered release is the one `--format bridge` writes.
const std::vector<BridgeRelease>& bridge_releases();
const std::string& bridge_dump_release();

// One entry per field and spelling of its type and default: a field whose default changed
// between releases is listed once per default, the newest release's first.
const std::vector<BridgeField>& bridge_fields();
// The field at `path` in any release; with `class_name`, that class's declaration (defaults
// differ between the dataset classes), else the first one listed (the newest spelling).
const BridgeField* find_bridge_field(const std::string& path, std::string_view class_name = {});
// Every default `path` has in some release (of `class_name`'s declaration when given).
std::vector<std::string> bridge_field_defaults(const std::string& path,
                                               std::string_view class_name = {});
// The releases declaring `path` (space-separated labels, oldest first).
std::string bridge_field_releases(const std::string& path);

enum class BridgeFieldClass { honoured, inert, refused };
std::string_view to_string(BridgeFieldClass kind);

struct BridgeRule {
  BridgeFieldClass kind = BridgeFieldClass::refused;
  std::string pattern;  // section.field, or a prefix ending in '*'
  std::string target;   // honoured: this program's key path, or "special" (translated in code)
  std::vector<std::string> accepted;  // refused: values that are fine; empty: Bridge's default
  std::string note;                   // honoured: how; inert: what; refused: the feature
};

// The rules in table order; the docs table and the unclassified-field test read them.
const std::vector<BridgeRule>& bridge_rules();

// The rule for a field path: an exact pattern first, else the longest matching prefix.
const BridgeRule* classify_bridge_field(const std::string& path);

// Values a refused field may take: the rule's list, or the field's Bridge default (a refused
// rule without a list covers only fields whose default is the same in every release; a test
// checks it).
std::vector<std::string> bridge_accepted_values(const BridgeRule& rule, const std::string& path,
                                                std::string_view class_name = {});

// Canonical spelling used to compare dump values with defaults and accepted lists: numbers in
// shortest round-trip form, true/false, null, strings verbatim.
std::string canonical_bridge_value(const std::string& text);

}  // namespace dyncp::config
