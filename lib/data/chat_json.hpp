#pragma once
// Reads one chat sample from a JSON line into what the chat template sees (chat_template.hpp).
//
// Layouts:
//   OpenAI    {"messages": [{"role", "content", "reasoning_content"?, "tool_calls"?, ...}],
//              "tools"?: [...], "documents"?: [...], "chat_template_kwargs"?: {...}};
//              messages are passed on with every key
//   ShareGPT  {"conversations": [{"from": "human" | "gpt" | "system" | "observation" |
//              "function_call", "value": ...}], "tools"?: ...}; roles become user, assistant,
//              system, tool, and a function_call's value ({"name", "arguments"}) an assistant
//              tool call
//   mapped    the same with other key and role names (ChatFieldMapping)
// Numbers keep their exact value (integers of any size, float spellings) and keys their
// order, as Python's json.loads does, so `tojson` prints them as transformers does.
//
// Refused with file:line: invalid UTF-8 or JSON, no message list, an empty conversation, one
// without an assistant turn, roles other than system, user, assistant, tool, content that is
// not a string (null only for an assistant message with tool calls; lists of content parts are
// not supported), non-string reasoning, tool calls that are not objects with a string name and
// arguments, tools or documents that are not lists, chat_template_kwargs that is not an object.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/chat_template.hpp"

namespace dyncp::data {

struct ChatFieldMapping {
  // Key of the message list; empty: "messages", else "conversations".
  std::string messages_key;
  // Keys of a message's role and text; empty: "role"/"content" for "messages", "from"/"value"
  // for "conversations".
  std::string role_key;
  std::string content_key;
  std::string tools_key = "tools";
  std::string documents_key = "documents";
  // A per-sample JSON object of template kwargs (ChatSample::template_kwargs).
  std::string template_kwargs_key = "chat_template_kwargs";
  // Extra role names (name in the data, role the template sees), checked before the
  // built-in ShareGPT names (human, gpt, model, observation, function, function_call).
  std::vector<std::pair<std::string, std::string>> role_names;
};

ChatSample parse_chat_sample(std::string_view json_text, const std::string& where,
                             const ChatFieldMapping& mapping = {});

}  // namespace dyncp::data
