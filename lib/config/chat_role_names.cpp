#include "config/chat_role_names.hpp"

#include <algorithm>

namespace dyncp::config {

ChatRoleNames parse_chat_role_names(const std::string& text) {
  ChatRoleNames out;
  if (text.empty()) return out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, comma - start);
    const std::size_t equals = entry.find('=');
    const std::string role = equals == std::string::npos ? "" : entry.substr(equals + 1);
    if (equals == 0 ||
        (role != "system" && role != "user" && role != "assistant" && role != "tool")) {
      out.bad_entry = entry;
      out.pairs.clear();
      return out;
    }
    out.pairs.emplace_back(entry.substr(0, equals), role);
    start = comma + 1;
  }
  return out;
}

}  // namespace dyncp::config
