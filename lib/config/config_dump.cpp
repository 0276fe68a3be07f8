// Resolved configuration as YAML. Written by hand (not through yaml-cpp's emitter) so the
// layout is stable: sections in key-table order, one key per line, strings double-quoted.

#include <cstdio>
#include <map>
#include <sstream>

#include "config/config_loader.hpp"
#include "config/key_table.hpp"

namespace dyncp::config {

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned char>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string yaml_value(const KeySpec& spec, const KeyValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) {
    return spec.type == KeyType::choice ? *text : quoted(*text);
  }
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    std::string out;
    for (const auto& item : *list) {
      out += (out.empty() ? "" : ", ") + (spec.choices.empty() ? quoted(item) : item);
    }
    return "[" + out + "]";
  }
  return format_value(value);
}

}  // namespace

std::string dump_config_yaml(const ConfigContainer& config) {
  std::ostringstream out;
  std::string current_section;
  for (const auto& spec : key_table()) {
    const auto dot = spec.path.find('.');
    const std::string section = dot == std::string::npos ? "" : spec.path.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? spec.path : spec.path.substr(dot + 1);
    if (section != current_section && !section.empty()) out << section << ":\n";
    current_section = section;
    out << (section.empty() ? "" : "  ") << leaf << ": " << yaml_value(spec, spec.get(config))
        << "\n";
  }
  return out.str();
}

}  // namespace dyncp::config
