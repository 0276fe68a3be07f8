#include "data/chat_template.hpp"

#include "core/error.hpp"
#include "data/content_hash.hpp"

namespace dyncp::data {

namespace {

// FNV-1a of the exact chat_template text shipped with Qwen3 (tokenizer_config.json).
constexpr std::uint64_t qwen3_template_hash = 0x2bfdb7aa9754484eULL;

constexpr std::string_view tools_preamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view tools_postamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

// Python str.strip/lstrip/rstrip with '\n' as the only stripped character.
std::string lstrip_newlines(const std::string& text) {
  const std::size_t first = text.find_first_not_of('\n');
  return first == std::string::npos ? std::string() : text.substr(first);
}
std::string rstrip_newlines(const std::string& text) {
  const std::size_t last = text.find_last_not_of('\n');
  return last == std::string::npos ? std::string() : text.substr(0, last + 1);
}
std::string strip_newlines(const std::string& text) {
  return lstrip_newlines(rstrip_newlines(text));
}

bool starts_with(const std::string& text, std::string_view prefix) {
  return text.starts_with(prefix);
}
bool ends_with(const std::string& text, std::string_view suffix) {
  return text.ends_with(suffix);
}

// Python text.split(separator)[-1] and [0].
std::string after_last(const std::string& text, std::string_view separator) {
  const std::size_t found = text.rfind(separator);
  return found == std::string::npos ? text : text.substr(found + separator.size());
}
std::string before_first(const std::string& text, std::string_view separator) {
  const std::size_t found = text.find(separator);
  return found == std::string::npos ? text : text.substr(0, found);
}

// Index of the last user message that is a real query (not a wrapped tool response), scanning
// backwards as the template does; the last index when there is none.
std::size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (std::size_t k = messages.size(); k-- > 0;) {
    const ChatMessage& message = messages[k];
    if (message.role == ChatRole::user && !(starts_with(message.content, "<tool_response>") &&
                                            ends_with(message.content, "</tool_response>"))) {
      return k;
    }
  }
  return messages.size() - 1;
}

}  // namespace

const char* to_string(ChatRole role) {
  switch (role) {
    case ChatRole::system:
      return "system";
    case ChatRole::user:
      return "user";
    case ChatRole::assistant:
      return "assistant";
    case ChatRole::tool:
      return "tool";
  }
  return "?";
}

RenderedChat render_qwen3_chat(const Conversation& conversation, const std::string& where) {
  const auto& messages = conversation.messages;
  if (messages.empty())
    core::throw_data_error(where, "empty conversation: \"messages\" has no entries");
  bool has_assistant = false;
  for (const ChatMessage& message : messages) has_assistant |= message.role == ChatRole::assistant;
  if (!has_assistant) {
    core::throw_data_error(where,
                           "conversation has no assistant turn, so nothing would be trained on");
  }

  RenderedChat rendered;
  std::string& out = rendered.text;
  const bool system_first = messages.front().role == ChatRole::system;
  if (!conversation.tools.empty()) {
    out += "<|im_start|>system\n";
    if (system_first) out += messages.front().content + "\n\n";
    out += tools_preamble;
    for (const std::string& tool : conversation.tools) out += "\n" + tool;
    out += tools_postamble;
  } else if (system_first) {
    out += "<|im_start|>system\n" + messages.front().content + "<|im_end|>\n";
  }

  const std::size_t query_index = last_query_index(messages);
  for (std::size_t index = 0; index < messages.size(); ++index) {
    const ChatMessage& message = messages[index];
    const bool is_last = index + 1 == messages.size();
    if (message.role == ChatRole::user || (message.role == ChatRole::system && index != 0)) {
      out += std::string("<|im_start|>") + to_string(message.role) + "\n" + message.content +
             "<|im_end|>\n";
    } else if (message.role == ChatRole::assistant) {
      std::string content = message.content;
      std::string reasoning;
      if (message.reasoning_content) {
        reasoning = *message.reasoning_content;
      } else if (content.find("</think>") != std::string::npos) {
        reasoning = lstrip_newlines(
            after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
        content = lstrip_newlines(after_last(content, "</think>"));
      }
      out += "<|im_start|>assistant\n";
      const std::size_t loss_begin = out.size();
      if (index > query_index && (is_last || !reasoning.empty())) {
        out +=
            "<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
      } else {
        out += content;
      }
      for (std::size_t call = 0; call < message.tool_calls.size(); ++call) {
        if ((call == 0 && !content.empty()) || call > 0) out += "\n";
        const ToolCall& tool_call = message.tool_calls[call];
        out += "<tool_call>\n{\"name\": \"" + tool_call.name +
               "\", \"arguments\": " + tool_call.arguments + "}\n</tool_call>";
      }
      out += "<|im_end|>";
      rendered.loss_ranges.emplace_back(loss_begin, out.size());
      out += "\n";
    } else if (message.role == ChatRole::tool) {
      if (index == 0 || messages[index - 1].role != ChatRole::tool) out += "<|im_start|>user";
      out += "\n<tool_response>\n" + message.content + "\n</tool_response>";
      if (is_last || messages[index + 1].role != ChatRole::tool) out += "<|im_end|>\n";
    }
  }
  return rendered;
}

TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation,
                            const std::string& where) {
  const RenderedChat rendered = render_qwen3_chat(conversation, where);
  // Normalize each span separately so loss ranges stay exact in the normalized text.
  std::string normalized;
  std::vector<std::pair<std::size_t, std::size_t>> loss_ranges;
  std::size_t cursor = 0;
  for (const auto& [begin, end] : rendered.loss_ranges) {
    normalized +=
        tokenizer.normalize(std::string_view(rendered.text).substr(cursor, begin - cursor));
    const std::size_t normalized_begin = normalized.size();
    normalized += tokenizer.normalize(std::string_view(rendered.text).substr(begin, end - begin));
    loss_ranges.emplace_back(normalized_begin, normalized.size());
    cursor = end;
  }
  normalized += tokenizer.normalize(std::string_view(rendered.text).substr(cursor));

  const Encoding encoding = tokenizer.encode_with_offsets(normalized, where);
  TokenizedChat result;
  result.tokens = encoding.ids;
  result.loss_mask.assign(encoding.ids.size(), 0);
  std::size_t range = 0;
  for (std::size_t i = 0; i < encoding.ids.size(); ++i) {
    const std::size_t offset = encoding.offsets[i];
    while (range < loss_ranges.size() && loss_ranges[range].second <= offset) ++range;
    if (range < loss_ranges.size() && offset >= loss_ranges[range].first) result.loss_mask[i] = 1;
  }
  return result;
}

bool is_supported_chat_template(const std::string& chat_template) {
  return ContentHasher().update(chat_template).digest() == qwen3_template_hash;
}

void require_supported_chat_template(const Tokenizer& tokenizer, const std::string& where) {
  if (tokenizer.chat_template().empty()) {
    core::throw_data_error(
        where,
        "the tokenizer has no chat_template (tokenizer_config.json); chat data needs "
        "Qwen3's template");
  }
  if (!is_supported_chat_template(tokenizer.chat_template())) {
    core::throw_data_error(where,
                           "the tokenizer's chat_template is not the Qwen3 template this renderer "
                           "reproduces; use a Qwen3 tokenizer or token-id JSONL (docs/data.md)");
  }
}

}  // namespace dyncp::data
