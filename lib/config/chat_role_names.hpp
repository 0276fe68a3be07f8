#pragma once
// dataset.chat_role_names: "name=role,..." (e.g. "customer=user,agent=assistant"), mapping a
// dataset's role names onto the chat template's. One parser for the config rules (which report
// a bad entry) and the data setup (which uses the pairs).

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dyncp::config {

struct ChatRoleNames {
  std::vector<std::pair<std::string, std::string>> pairs;  // (dataset name, template role)
  std::optional<std::string> bad_entry;                    // the first entry that is not name=role
};

// role must be one of system, user, assistant, tool; an empty string has no pairs.
ChatRoleNames parse_chat_role_names(const std::string& text);

}  // namespace dyncp::config
