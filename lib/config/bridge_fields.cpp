#include "config/bridge_fields.hpp"

#include <charconv>
#include <cmath>

namespace dyncp::config {

const std::vector<BridgeField>& bridge_fields() {
  static const std::vector<BridgeField> fields = {
#define DYNCP_BRIDGE_FIELD(section, class_name, name, type, default_value) \
  BridgeField{section, class_name, name, type, default_value},
#include "config/bridge_fields.inc"
#undef DYNCP_BRIDGE_FIELD
  };
  return fields;
}

const BridgeField* find_bridge_field(const std::string& path, std::string_view class_name) {
  const BridgeField* first = nullptr;
  for (const auto& field : bridge_fields()) {
    if (path.size() == field.section.size() + 1 + field.name.size() &&
        path.compare(0, field.section.size(), field.section) == 0 &&
        path[field.section.size()] == '.' &&
        path.compare(field.section.size() + 1, std::string::npos, field.name) == 0) {
      if (class_name.empty() || field.class_name == class_name) return &field;
      if (first == nullptr) first = &field;
    }
  }
  return first;
}

std::string_view to_string(BridgeFieldClass kind) {
  switch (kind) {
    case BridgeFieldClass::honoured:
      return "honoured";
    case BridgeFieldClass::inert:
      return "inert";
    case BridgeFieldClass::refused:
      return "refused";
  }
  return "?";
}

namespace {

// '*' matches any run of characters (fnmatch without classes).
bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern.front() == '*') {
    for (std::size_t skip = 0; skip <= text.size(); ++skip) {
      if (glob_match(pattern.substr(1), text.substr(skip))) return true;
    }
    return false;
  }
  return !text.empty() && pattern.front() == text.front() &&
         glob_match(pattern.substr(1), text.substr(1));
}

std::size_t literal_length(const std::string& pattern) {
  std::size_t count = 0;
  for (const char c : pattern) count += c == '*' ? 0 : 1;
  return count;
}

}  // namespace

const BridgeRule* classify_bridge_field(const std::string& path) {
  const BridgeRule* best = nullptr;
  std::size_t best_length = 0;
  for (const auto& rule : bridge_rules()) {
    if (rule.pattern == path) return &rule;
    if (rule.pattern.find('*') != std::string::npos && glob_match(rule.pattern, path) &&
        literal_length(rule.pattern) > best_length) {
      best = &rule;
      best_length = literal_length(rule.pattern);
    }
  }
  return best;
}

std::vector<std::string> bridge_accepted_values(const BridgeRule& rule, const std::string& path,
                                                std::string_view class_name) {
  if (!rule.accepted.empty()) return rule.accepted;
  const auto* field = find_bridge_field(path, class_name);
  if (field == nullptr) return {"null"};
  return {std::string(field->default_value)};
}

std::string canonical_bridge_value(const std::string& text) {
  if (text == "True" || text == "TRUE") return "true";
  if (text == "False" || text == "FALSE") return "false";
  if (text == "~" || text == "Null" || text == "NULL" || text == "None") return "null";
  if (text.empty()) return text;
  double number = 0.0;
  const char* begin = text.data() + (text[0] == '+' ? 1 : 0);
  const auto result = std::from_chars(begin, text.data() + text.size(), number);
  if (result.ec == std::errc() && result.ptr == text.data() + text.size() &&
      std::isfinite(number)) {
    if (number == std::floor(number) && std::fabs(number) < 1e15) {
      return std::to_string(static_cast<long long>(number));
    }
    char buffer[64];
    const auto written = std::to_chars(buffer, buffer + sizeof(buffer), number);
    return std::string(buffer, written.ptr);
  }
  return text;
}

}  // namespace dyncp::config
