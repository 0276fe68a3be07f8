#include "config/bridge_fields.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace dyncp::config {

bool BridgeField::in_release(std::string_view label) const {
  std::size_t start = 0;
  while (start <= releases.size()) {
    const auto end = std::min(releases.find(' ', start), releases.size());
    if (releases.substr(start, end - start) == label) return true;
    start = end + 1;
  }
  return false;
}

const std::vector<BridgeRelease>& bridge_releases() {
  static const std::vector<BridgeRelease> releases = {
#define DYNCP_BRIDGE_RELEASE(label, sources) BridgeRelease{label, sources},
#define DYNCP_BRIDGE_FIELD(section, class_name, name, type, default_value, releases)
#include "config/bridge_fields.inc"
#undef DYNCP_BRIDGE_FIELD
#undef DYNCP_BRIDGE_RELEASE
  };
  return releases;
}

const std::string& bridge_dump_release() {
  static const std::string label = [] {
    std::string last;
    for (const auto& release : bridge_releases()) {
      if (!release.label.empty() && std::isdigit(static_cast<unsigned char>(release.label[0]))) {
        last = std::string(release.label);
      }
    }
    return last;
  }();
  return label;
}

const std::vector<BridgeField>& bridge_fields() {
  static const std::vector<BridgeField> fields = {
#define DYNCP_BRIDGE_RELEASE(label, sources)
#define DYNCP_BRIDGE_FIELD(section, class_name, name, type, default_value, releases) \
  BridgeField{section, class_name, name, type, default_value, releases},
#include "config/bridge_fields.inc"
#undef DYNCP_BRIDGE_FIELD
#undef DYNCP_BRIDGE_RELEASE
  };
  return fields;
}

namespace {

bool has_path(const BridgeField& field, const std::string& path) {
  return path.size() == field.section.size() + 1 + field.name.size() &&
         path.compare(0, field.section.size(), field.section) == 0 &&
         path[field.section.size()] == '.' &&
         path.compare(field.section.size() + 1, std::string::npos, field.name) == 0;
}

}  // namespace

const BridgeField* find_bridge_field(const std::string& path, std::string_view class_name) {
  const BridgeField* first = nullptr;
  for (const auto& field : bridge_fields()) {
    if (has_path(field, path)) {
      if (class_name.empty() || field.class_name == class_name) return &field;
      if (first == nullptr) first = &field;
    }
  }
  return first;
}

std::vector<std::string> bridge_field_defaults(const std::string& path,
                                               std::string_view class_name) {
  // A class that does not declare the field (another dataset class) falls back to all of them.
  bool class_declares = false;
  for (const auto& field : bridge_fields()) {
    class_declares = class_declares || (has_path(field, path) && field.class_name == class_name);
  }
  std::vector<std::string> out;
  for (const auto& field : bridge_fields()) {
    if (!has_path(field, path) || (class_declares && field.class_name != class_name)) continue;
    const std::string value(field.default_value);
    if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
  }
  return out;
}

std::string bridge_field_releases(const std::string& path) {
  std::string out;
  for (const auto& release : bridge_releases()) {
    for (const auto& field : bridge_fields()) {
      if (has_path(field, path) && field.in_release(release.label)) {
        out += (out.empty() ? "" : " ") + std::string(release.label);
        break;
      }
    }
  }
  return out;
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
  auto defaults = bridge_field_defaults(path, class_name);
  if (defaults.empty()) return {"null"};
  return defaults;
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
