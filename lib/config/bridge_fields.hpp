#pragma once
// Every field of Megatron-Bridge's ConfigContainer sections, as the published dataclasses
// declare them (tools/bridge/extract_bridge_fields.py writes bridge_fields.inc from the
// megatron-bridge and megatron-core wheels), and the classification of each one: honoured
// (mapped to this program's key), inert (a performance or infrastructure knob: accepted, one
// summary warning when it is not at Bridge's default) or refused (changes the math or the layout
// and is not built: any value but the supported ones exits 2).

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
  std::string path() const { return std::string(section) + "." + std::string(name); }
};

const std::vector<BridgeField>& bridge_fields();
// The field at `path`; with `class_name`, that class's declaration (defaults differ between
// the dataset classes), else the first one listed.
const BridgeField* find_bridge_field(const std::string& path, std::string_view class_name = {});

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

// Values a refused field may take: the rule's list, or the field's Bridge default.
std::vector<std::string> bridge_accepted_values(const BridgeRule& rule, const std::string& path,
                                                std::string_view class_name = {});

// Canonical spelling used to compare dump values with defaults and accepted lists: numbers in
// shortest round-trip form, true/false, null, strings verbatim.
std::string canonical_bridge_value(const std::string& text);

}  // namespace dyncp::config
