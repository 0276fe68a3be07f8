#include "data/chat_json.hpp"

#include <stdexcept>

#include "core/error.hpp"
#include "core/json_text_check.hpp"
#include "data/utf8.hpp"

namespace dyncp::data {

namespace {

using jinja::Dict;
using jinja::Value;

const char* const supported_roles = "[system, user, assistant, tool]";

Value parse_json(std::string_view text, const std::string& where) {
  try {
    return jinja::parse_json_value(text);
  } catch (const std::invalid_argument& error) {
    core::throw_data_error(where, std::string("invalid JSON: ") + error.what());
  }
}

std::string map_role(const std::string& name, const ChatFieldMapping& mapping) {
  for (const auto& [from, to] : mapping.role_names) {
    if (from == name) return to;
  }
  if (name == "human") return "user";
  if (name == "gpt" || name == "model" || name == "function_call") return "assistant";
  if (name == "observation" || name == "function") return "tool";
  return name;
}

void check_tool_calls(const Value& calls, const std::string& where) {
  if (calls.is_none()) return;
  if (!calls.is_list()) core::throw_data_error(where, "\"tool_calls\" must be a list");
  for (std::size_t i = 0; i < calls.items().size(); ++i) {
    const std::string call_where = where + ".tool_calls[" + std::to_string(i) + "]";
    const Value* call = &calls.items()[i];
    if (!call->is_dict()) core::throw_data_error(call_where, "a tool call must be an object");
    // Templates unwrap {"function": {...}} when "function" is there.
    if (const Value* function = call->dict_ptr()->find("function");
        function != nullptr && function->is_dict() && function->truthy()) {
      call = function;
    }
    const Value* name = call->dict_ptr()->find("name");
    if (name == nullptr || !name->is_string())
      core::throw_data_error(call_where, "tool call has no string \"name\"");
    const Value* arguments = call->dict_ptr()->find("arguments");
    if (arguments == nullptr || arguments->is_none())
      core::throw_data_error(call_where, "tool call has no \"arguments\"");
  }
}

// transformers' _alias_reasoning_fields: the first of reasoning_content, thinking, reasoning
// that is set becomes {"thinking": r, **message, "reasoning_content": r}.
Value alias_reasoning(const Value& message) {
  const Dict& fields = *message.dict_ptr();
  const Value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const Value* found = fields.find(key);
    if (found != nullptr && !found->is_none()) {
      reasoning = found;
      break;
    }
  }
  if (reasoning == nullptr) return message;
  auto aliased = std::make_shared<Dict>();
  aliased->set("thinking", *reasoning);
  for (const auto& [key, value] : fields.entries) aliased->set(key, value);
  aliased->set("reasoning_content", *reasoning);
  return Value::dict(std::move(aliased));
}

// A message of a mapped layout (ShareGPT and others) in the OpenAI form templates read.
Value openai_message(const Value& entry, const std::string& role_key,
                     const std::string& content_key, const ChatFieldMapping& mapping,
                     const std::string& where) {
  const Value* role = entry.dict_ptr()->find(role_key);
  if (role == nullptr || !role->is_string())
    core::throw_data_error(where, "message has no string \"" + role_key + "\"");
  auto message = std::make_shared<Dict>();
  message->set("role", Value::string(map_role(role->text(), mapping)));
  const Value* content = entry.dict_ptr()->find(content_key);
  if (role->text() == "function_call") {
    if (content == nullptr || !content->is_string())
      core::throw_data_error(where,
                             "a function_call needs a \"" + content_key + "\" with its JSON");
    const Value call = parse_json(content->text(), where + " (function_call " + content_key + ")");
    if (!call.is_dict())
      core::throw_data_error(where, "a function_call's value must be a JSON object");
    auto wrapped = std::make_shared<Dict>();
    wrapped->set("type", Value::string("function"));
    wrapped->set("function", call);
    message->set("content", Value::string(""));
    message->set("tool_calls", Value::list({Value::dict(std::move(wrapped))}));
  } else {
    message->set("content", content != nullptr ? *content : Value::undefined_named(content_key));
  }
  for (const auto& [key, value] : entry.dict_ptr()->entries) {
    if (key != role_key && key != content_key) message->set(key, value);
  }
  return Value::dict(std::move(message));
}

Value checked_message(const Value& entry, const std::string& role_key,
                      const std::string& content_key, bool mapped, const ChatFieldMapping& mapping,
                      const std::string& where) {
  if (!entry.is_dict()) core::throw_data_error(where, "a message must be an object");
  const Value message =
      mapped ? openai_message(entry, role_key, content_key, mapping, where) : entry;
  const Dict& fields = *message.dict_ptr();
  const Value* role = fields.find("role");
  if (role == nullptr || !role->is_string())
    core::throw_data_error(where, "message has no string \"role\"");
  const std::string& name = role->text();
  if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
    core::throw_data_error(where, "unknown role \"" + name + "\"; expected one of " +
                                      supported_roles +
                                      " (map others with the dataset's role names)");
  }
  const Value* tool_calls = fields.find("tool_calls");
  const bool has_tool_calls = tool_calls != nullptr && tool_calls->truthy();
  const Value* content = fields.find("content");
  const bool null_content_allowed = name == "assistant" && has_tool_calls;
  if (content == nullptr ||
      !(content->is_string() || (content->is_none() && null_content_allowed))) {
    core::throw_data_error(where,
                           "\"" + (mapped ? content_key : std::string("content")) +
                               "\" must be a string (use \"\" for an empty turn; null only for an "
                               "assistant turn with tool_calls); lists of content parts are not "
                               "supported");
  }
  if (const Value* reasoning = fields.find("reasoning_content");
      reasoning != nullptr && !reasoning->is_none() && !reasoning->is_string()) {
    core::throw_data_error(where, "\"reasoning_content\" must be a string or null");
  }
  if (tool_calls != nullptr) {
    if (name != "assistant")
      core::throw_data_error(where, "only assistant messages may have \"tool_calls\"");
    check_tool_calls(*tool_calls, where);
  }
  // transformers drops every key whose value is None before the template sees the message.
  auto present = std::make_shared<Dict>();
  for (const auto& [key, value] : fields.entries) {
    if (!value.is_none()) present->set(key, value);
  }
  return alias_reasoning(Value::dict(std::move(present)));
}

}  // namespace

ChatSample parse_chat_sample(std::string_view json_text, const std::string& where,
                             const ChatFieldMapping& mapping) {
  require_valid_utf8(json_text, where);
  core::check_json_text(json_text, where, 0);
  const Value root = parse_json(json_text, where);
  if (!root.is_dict()) core::throw_data_error(where, "a chat sample must be a JSON object");
  const Dict& fields = *root.dict_ptr();

  std::string messages_key = mapping.messages_key;
  if (messages_key.empty())
    messages_key = fields.find("messages") != nullptr || fields.find("conversations") == nullptr
                       ? "messages"
                       : "conversations";
  const Value* entries = fields.find(messages_key);
  if (entries == nullptr) {
    core::throw_data_error(where,
                           "missing \"" + messages_key +
                               "\"; a chat sample is {\"messages\": [{\"role\", \"content\"}, "
                               "...]} or ShareGPT {\"conversations\": [{\"from\", \"value\"}]}");
  }
  if (!entries->is_list()) core::throw_data_error(where, "\"" + messages_key + "\" must be a list");
  const bool sharegpt = messages_key == "conversations";
  const std::string role_key = !mapping.role_key.empty() ? mapping.role_key
                               : sharegpt                ? "from"
                                                         : "role";
  const std::string content_key = !mapping.content_key.empty() ? mapping.content_key
                                  : sharegpt                   ? "value"
                                                               : "content";
  const bool mapped = role_key != "role" || content_key != "content" || !mapping.role_names.empty();

  ChatSample sample;
  jinja::ValueList messages;
  bool has_assistant = false;
  for (std::size_t i = 0; i < entries->items().size(); ++i) {
    const std::string message_where = where + ": " + messages_key + "[" + std::to_string(i) + "]";
    Value message =
        checked_message(entries->items()[i], role_key, content_key, mapped, mapping, message_where);
    has_assistant |= message.dict_ptr()->find("role")->text() == "assistant";
    messages.push_back(std::move(message));
  }
  if (messages.empty()) {
    core::throw_data_error(where, "empty conversation: \"" + messages_key + "\" has no entries");
  }
  if (!has_assistant) {
    core::throw_data_error(where,
                           "conversation has no assistant turn, so nothing would be trained on");
  }
  sample.messages = Value::list(std::move(messages));
  for (const auto& [key, target] : {std::pair{mapping.tools_key, &sample.tools},
                                    std::pair{mapping.documents_key, &sample.documents}}) {
    const Value* value = fields.find(key);
    if (value == nullptr || value->is_none()) {
      *target = Value::none();
    } else if (!value->is_list()) {
      core::throw_data_error(where, "\"" + key + "\" must be a list");
    } else {
      *target = *value;
    }
  }
  if (const Value* kwargs = fields.find(mapping.template_kwargs_key);
      kwargs != nullptr && !kwargs->is_none()) {
    if (!kwargs->is_dict()) {
      core::throw_data_error(
          where, "\"" + mapping.template_kwargs_key + "\" must be an object of template variables");
    }
    for (const auto& [name, value] : kwargs->dict_ptr()->entries)
      sample.template_kwargs.emplace_back(name, value);
  }
  return sample;
}

}  // namespace dyncp::data
