#include "data/chat_json.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/utf8.hpp"

namespace dyncp::data {

namespace {

using ordered_json = nlohmann::ordered_json;

void append_python_string(std::string& out, const std::string& text) {
  out.push_back('"');
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
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out.push_back(c);  // ensure_ascii=False: non-ASCII stays as UTF-8
        }
    }
  }
  out.push_back('"');
}

// Python json.dumps(value, ensure_ascii=False) with default separators ", " and ": ", keys in
// input order: the template's `tojson` filter as transformers defines it.
void append_python_json(std::string& out, const ordered_json& value) {
  switch (value.type()) {
    case ordered_json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_string(out, key);
        out += ": ";
        append_python_json(out, item);
      }
      out.push_back('}');
      break;
    }
    case ordered_json::value_t::array: {
      out.push_back('[');
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ", ";
        append_python_json(out, value[i]);
      }
      out.push_back(']');
      break;
    }
    case ordered_json::value_t::string:
      append_python_string(out, value.get<std::string>());
      break;
    default:
      out += value.dump();  // numbers, booleans, null print the same as Python's json
  }
}

std::string python_tojson(const ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

ChatRole parse_role(const ordered_json& message, const std::string& where) {
  if (!message.contains("role") || !message["role"].is_string()) {
    core::throw_data_error(where, "message has no string \"role\"");
  }
  const std::string role = message["role"].get<std::string>();
  if (role == "system") return ChatRole::system;
  if (role == "user") return ChatRole::user;
  if (role == "assistant") return ChatRole::assistant;
  if (role == "tool") return ChatRole::tool;
  core::throw_data_error(
      where, "unknown role \"" + role + "\"; expected one of [system, user, assistant, tool]");
}

std::vector<ToolCall> parse_tool_calls(const ordered_json& calls, const std::string& where) {
  std::vector<ToolCall> parsed;
  if (calls.is_null()) return parsed;
  if (!calls.is_array()) core::throw_data_error(where, "\"tool_calls\" must be a list");
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const std::string call_where = where + ".tool_calls[" + std::to_string(i) + "]";
    const ordered_json* call = &calls[i];
    if (!call->is_object()) core::throw_data_error(call_where, "a tool call must be an object");
    // The template unwraps {"function": {...}} when "function" is truthy.
    if (call->contains("function") && (*call)["function"].is_object() &&
        !(*call)["function"].empty()) {
      call = &(*call)["function"];
    }
    if (!call->contains("name") || !(*call)["name"].is_string()) {
      core::throw_data_error(call_where, "tool call has no string \"name\"");
    }
    ToolCall tool_call;
    tool_call.name = (*call)["name"].get<std::string>();
    const ordered_json arguments =
        call->contains("arguments") ? (*call)["arguments"] : ordered_json();
    if (arguments.is_null()) core::throw_data_error(call_where, "tool call has no \"arguments\"");
    tool_call.arguments =
        arguments.is_string() ? arguments.get<std::string>() : python_tojson(arguments);
    parsed.push_back(std::move(tool_call));
  }
  return parsed;
}

}  // namespace

Conversation parse_chat_sample(std::string_view json_text, const std::string& where) {
  require_valid_utf8(json_text, where);
  ordered_json root;
  try {
    root = ordered_json::parse(json_text);
  } catch (const ordered_json::exception& error) {
    core::throw_data_error(where, std::string("invalid JSON: ") + error.what());
  }
  if (!root.is_object()) core::throw_data_error(where, "a chat sample must be a JSON object");
  if (!root.contains("messages")) {
    core::throw_data_error(
        where,
        "missing \"messages\"; a chat sample is {\"messages\": [{\"role\", \"content\"}, ...]}");
  }
  const ordered_json& messages = root["messages"];
  if (!messages.is_array()) core::throw_data_error(where, "\"messages\" must be a list");

  Conversation conversation;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string message_where = where + ": messages[" + std::to_string(i) + "]";
    const ordered_json& message = messages[i];
    if (!message.is_object()) core::throw_data_error(message_where, "a message must be an object");
    ChatMessage parsed;
    parsed.role = parse_role(message, message_where);
    if (!message.contains("content") || !message["content"].is_string()) {
      core::throw_data_error(message_where,
                             "\"content\" must be a string (use \"\" for an empty turn); "
                             "lists of content parts are not supported");
    }
    parsed.content = message["content"].get<std::string>();
    if (message.contains("reasoning_content") && !message["reasoning_content"].is_null()) {
      if (!message["reasoning_content"].is_string()) {
        core::throw_data_error(message_where, "\"reasoning_content\" must be a string or null");
      }
      parsed.reasoning_content = message["reasoning_content"].get<std::string>();
    }
    if (message.contains("tool_calls")) {
      if (parsed.role != ChatRole::assistant) {
        core::throw_data_error(message_where, "only assistant messages may have \"tool_calls\"");
      }
      parsed.tool_calls = parse_tool_calls(message["tool_calls"], message_where);
    }
    conversation.messages.push_back(std::move(parsed));
  }
  if (root.contains("tools") && !root["tools"].is_null()) {
    if (!root["tools"].is_array()) core::throw_data_error(where, "\"tools\" must be a list");
    for (const auto& tool : root["tools"]) conversation.tools.push_back(python_tojson(tool));
  }
  return conversation;
}

}  // namespace dyncp::data
