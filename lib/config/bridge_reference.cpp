// The classification table of docs/config.md ("Coming from Megatron-Bridge"), generated from the
// rules and the extracted field list.

#include <set>
#include <sstream>

#include "config/bridge_fields.hpp"
#include "config/config_reference.hpp"

namespace dyncp::config {

std::string generate_bridge_reference() {
  std::ostringstream out;
  std::size_t honoured = 0, inert = 0, refused = 0, everywhere = 0;
  std::set<std::string> seen;
  for (const auto& field : bridge_fields()) {
    if (!seen.insert(std::string(field.class_name) + " " + field.path()).second) continue;
    const auto* rule = classify_bridge_field(field.path());
    if (rule == nullptr) continue;
    (rule->kind == BridgeFieldClass::honoured ? honoured
     : rule->kind == BridgeFieldClass::inert  ? inert
                                              : refused)++;
  }
  std::set<std::string> paths;
  for (const auto& field : bridge_fields()) paths.insert(field.path());
  for (const auto& path : paths) {
    std::size_t releases_declaring = 0, releases_read = 0;
    for (const auto& release : bridge_releases()) {
      if (release.label == bridge_dynamic_cp_label) continue;
      ++releases_read;
      for (const auto& field : bridge_fields()) {
        if (field.path() == path && field.in_release(release.label)) {
          ++releases_declaring;
          break;
        }
      }
    }
    everywhere += releases_declaring == releases_read ? 1 : 0;
  }
  std::string releases;
  for (const auto& release : bridge_releases()) {
    releases += (releases.empty() ? "" : "; ") + std::string(release.sources);
  }
  out << "\n## Coming from Megatron-Bridge: the classification table\n\n"
      << "Every field of Bridge's ConfigContainer sections in each release read (" << seen.size()
      << " field declarations, " << paths.size() << " field paths of which " << everywhere
      << " are in every release; the releases: " << releases
      << "), extracted by `tools/bridge/extract_bridge_fields.py` into "
         "`lib/config/bridge_fields.inc` with the releases that declare each one, falls under "
         "one rule below: "
      << honoured << " honoured, " << inert << " inert, " << refused
      << " refused. A pattern ending in `*` covers the fields it prefixes; the exact name "
         "wins over a pattern, a longer pattern over a shorter one. Refused fields accept the "
         "listed values (none listed: Bridge's default).\n\n"
      << "| class | Bridge field | maps to / supported | meaning |\n|---|---|---|---|\n";
  for (const auto& rule : bridge_rules()) {
    std::string mapped;
    if (rule.kind == BridgeFieldClass::honoured) {
      mapped = rule.target == "special" ? "(translated)" : "`" + rule.target + "`";
    } else if (rule.kind == BridgeFieldClass::refused) {
      std::string values;
      for (const auto& value : rule.accepted) values += (values.empty() ? "" : ", ") + value;
      mapped = values.empty() ? "Bridge's default" : values;
    }
    std::string pattern;
    for (const char c : rule.pattern) pattern += c == '|' ? std::string("\\|") : std::string(1, c);
    out << "| " << to_string(rule.kind) << " | `" << pattern << "` | " << mapped << " | "
        << rule.note << " |\n";
  }
  return out.str();
}

}  // namespace dyncp::config
