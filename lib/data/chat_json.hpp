#pragma once
// Reads one chat sample from JSON text: {"messages": [{"role", "content", "reasoning_content"?,
// "tool_calls"?}, ...], "tools"?: [...]}. Key order of tool schemas and arguments is kept, as
// Python's json.loads does, so tojson output matches the reference template's.

#include <string>
#include <string_view>

#include "data/chat_template.hpp"

namespace dyncp::data {

// Throws a data error naming `where` (file:line) for invalid UTF-8, invalid JSON, a missing or
// non-list "messages", unknown roles and non-string content.
Conversation parse_chat_sample(std::string_view json_text, const std::string& where);

}  // namespace dyncp::data
