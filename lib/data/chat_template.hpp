#pragma once
// Qwen3 ChatML rendering with assistant-only loss. This is not a Jinja engine: it implements the
// one template shipped in Qwen3's tokenizer_config.json (hybrid thinking), and renders text that
// is character-for-character what that template produces with add_generation_prompt=false.
//
// Supported (everything the Qwen3 template reads):
//   - roles system, user, assistant, tool; a system message first is the system turn, a later
//     one is rendered like a user turn with role "system"
//   - tools (top-level "tools" list): the "# Tools" system block, each tool as tojson
//   - assistant reasoning: `reasoning_content`, or the text inside <think>...</think> of content;
//     a think block is rendered for assistant turns after the last real user query when the turn
//     is the last message or has non-empty reasoning; elsewhere reasoning is dropped
//   - tool_calls (with or without a "function" wrapper): arguments given as a string are copied,
//     others serialised like Python json.dumps(ensure_ascii=False) (the template's tojson)
//   - consecutive tool messages share one user turn of <tool_response> blocks
// Rejected (the template would fail or silently drop them): content that is not a string,
// unknown roles, an empty conversation, a conversation without an assistant turn, tool_calls
// without a name.
//
// Loss: every assistant turn from the first byte after "<|im_start|>assistant\n" through its
// closing "<|im_end|>" (think block and tool calls included); never the "\n" after <|im_end|>,
// role headers, system/user/tool turns.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.hpp"

namespace dyncp::data {

enum class ChatRole { system, user, assistant, tool };

struct ToolCall {
  std::string name;
  // Rendered form of the arguments (a string argument verbatim, else its tojson text).
  std::string arguments;
};

struct ChatMessage {
  ChatRole role = ChatRole::user;
  std::string content;
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;  // each tool schema already as tojson text
};

struct RenderedChat {
  std::string text;
  // Byte ranges [begin, end) of `text` that carry loss, in order.
  std::vector<std::pair<std::size_t, std::size_t>> loss_ranges;
};

struct TokenizedChat {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> loss_mask;  // 1 where the token is a training target
};

// Throws a data error naming `where` for conversations the template cannot render faithfully.
RenderedChat render_qwen3_chat(const Conversation& conversation, const std::string& where);

// Renders and tokenizes; a token gets loss when its first byte lies in a loss range. Text is
// NFC-normalized span by span first so that offsets are exact.
TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const Conversation& conversation,
                            const std::string& where);

// Whether `chat_template` is the Qwen3 template this renderer reproduces.
bool is_supported_chat_template(const std::string& chat_template);

// Throws a data error naming `where` when the tokenizer's chat template is not supported.
void require_supported_chat_template(const Tokenizer& tokenizer, const std::string& where);

const char* to_string(ChatRole role);

}  // namespace dyncp::data
