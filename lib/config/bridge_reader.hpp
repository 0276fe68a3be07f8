#pragma once
// Internal to lib/config: reading a Megatron-Bridge ConfigContainer dump (docs/config.md,
// "Coming from Megatron-Bridge"). The YAML reader hands a document here when it carries
// `_target_` markers.

#include <string>
#include <vector>

#include "config/assignment.hpp"

namespace YAML {
class Node;
}

namespace dyncp::config::detail {

// A document with a root `_target_` or a section carrying one.
bool is_bridge_dump(const YAML::Node& root);

// The dump's honoured fields as assignments of this program's keys; refused values and unknown
// keys go to `problems`; inert fields set away from Bridge's default go to `inert_settings`
// ("path=value").
std::vector<Assignment> read_bridge_assignments(const YAML::Node& root, const std::string& source,
                                                ProblemList& problems,
                                                std::vector<std::string>& inert_settings);

}  // namespace dyncp::config::detail
