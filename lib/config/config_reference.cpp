#include "config/config_reference.hpp"

#include <sstream>

#include "config/key_table.hpp"

namespace dyncp::config {

namespace {

std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

std::string code_list(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + "`" + item + "`";
  return out;
}

}  // namespace

std::string generate_config_reference() {
  const ConfigContainer defaults;
  std::ostringstream out;
  out << config_reference_marker << "\n\n";
  out << "## Keys\n";
  std::string section = "?";
  for (const auto& spec : key_table()) {
    const auto dot = spec.path.find('.');
    const std::string key_section =
        dot == std::string::npos ? "(top level)" : spec.path.substr(0, dot);
    if (key_section != section) {
      section = key_section;
      out << "\n### " << section << "\n\n";
      out << "| key | type | default | meaning | rules |\n|---|---|---|---|---|\n";
    }
    std::string meaning = spec.doc;
    if (!spec.aliases.empty()) meaning += ". Aliases: " + code_list(spec.aliases, ", ");
    std::string rules = spec.rules;
    if (!spec.unbuilt_feature.empty()) {
      rules += std::string(rules.empty() ? "" : "; ") + "a non-default value needs " +
               spec.unbuilt_feature + " (not built yet: running exits 2)";
    }
    out << "| `" << spec.path << "` | " << cell(type_name(spec)) << " | `"
        << cell(format_value(spec.get(defaults))) << "` | " << cell(meaning) << " | " << cell(rules)
        << " |\n";
  }
  out << "\n## Accepted Megatron-Bridge keys with no effect\n\n";
  out << "Real Bridge recipes carry these keys. A matching value is accepted and changes "
         "nothing; any other value is rejected (exit 2) naming the feature it asks for.\n\n";
  out << "| key | accepted values | meaning here | other values ask for |\n|---|---|---|---|\n";
  for (const auto& inert : inert_keys()) {
    out << "| `" << inert.path << "` | " << code_list(inert.accepted, ", ") << " | "
        << cell(inert.meaning) << " | " << cell(inert.feature) << " |\n";
  }
  out << generate_bridge_reference();
  return out.str();
}

}  // namespace dyncp::config
