#pragma once
// Chat samples rendered with the tokenizer's own chat template (tokenizer_config.json's
// `chat_template` or chat_template.jinja) by the Jinja interpreter (jinja_template.hpp), exactly
// as transformers' apply_chat_template renders them, and the assistant-only loss mask.
//
// The template sees what transformers passes: `messages` (each message's reasoning copied to
// `reasoning_content` and `thinking` from whichever of reasoning_content / thinking / reasoning
// is set, as transformers does), `tools` and `documents` (None when the sample has none),
// `add_generation_prompt` (default false), the tokenizer's named special tokens (bos_token,
// eos_token, ...), and the template kwargs from the dataset config, which override them.
//
// Loss:
//   - a template with {% generation %} blocks: every token that overlaps a generation block
//     (transformers' return_assistant_tokens_mask);
//   - otherwise, per assistant message, the text its iteration of the template's message loop
//     wrote, minus the assistant header and the whitespace after the turn's end. The header is
//     what the rendering of the conversation before that message with add_generation_prompt
//     writes after the text it shares with the rendering without (for Qwen3
//     "<|im_start|>assistant\n"; Phi-3.5 "<|assistant|>\n", whose unprompted rendering ends
//     with eos instead), the shared text cut back so that it splits no special token; a turn that
//     starts with only part of it (a Qwen3.5 turn before the last query has no "<think>\n") loses
//     the longest part that ends at a newline or a special token. A token has loss when its first
//     byte lies in such a range. For Qwen3 this is everything from after "<|im_start|>assistant\n"
//     through the closing <|im_end|>.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/jinja_template.hpp"
#include "data/tokenizer.hpp"

namespace dyncp::data {

// Extra template variables (enable_thinking, add_generation_prompt, date_string, ...).
using ChatTemplateKwargs = std::vector<std::pair<std::string, jinja::Value>>;

// One chat sample as the template sees it.
struct ChatSample {
  jinja::Value messages;   // list of message dicts
  jinja::Value tools;      // list, or None
  jinja::Value documents;  // list, or None
  // The sample's own template kwargs ("chat_template_kwargs" in its JSON line): applied after
  // the dataset's (dataset.chat_template_kwargs), so a sample overrides them.
  ChatTemplateKwargs template_kwargs;
};

struct RenderedChat {
  std::string text;
  // Byte ranges [begin, end) of `text` that carry loss, in order.
  std::vector<std::pair<std::size_t, std::size_t>> loss_ranges;
  // True when the ranges are generation blocks: then every token overlapping a range has loss,
  // else the tokens whose first byte lies in one.
  bool from_generation_blocks = false;
};

struct TokenizedChat {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> loss_mask;  // 1 where the token is a training target
};

class ChatTemplate {
 public:
  // The tokenizer's chat template; a data error naming `where` when the tokenizer has none or
  // the template uses syntax the interpreter does not support (naming the template line).
  static ChatTemplate from_tokenizer(const Tokenizer& tokenizer, const std::string& where);
  static ChatTemplate from_source(const std::string& source, const Tokenizer& tokenizer,
                                  const std::string& where);

  // The rendered text, byte-exact with apply_chat_template(tokenize=False, **kwargs), and its
  // loss ranges. Template errors (raise_exception included) are data errors naming `where`.
  RenderedChat render(const ChatSample& sample, const ChatTemplateKwargs& kwargs,
                      const std::string& where) const;

 private:
  jinja::Template template_;
  // The "tool_use" template of a tokenizer with named templates, for samples with tools.
  std::optional<jinja::Template> tool_use_template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::vector<std::string> added_tokens_;

  jinja::RenderedTemplate render_raw(const jinja::Value& messages, const ChatSample& sample,
                                     const ChatTemplateKwargs& kwargs, bool generation_prompt,
                                     const std::string& where) const;
  std::string assistant_header(const ChatSample& sample, const ChatTemplateKwargs& kwargs,
                               const std::string& where) const;
  // Length of the common prefix of a and b, cut back so that it splits no added token.
  std::size_t shared_length(std::string_view a, std::string_view b) const;
};

// Renders and tokenizes the whole text at once (so ids equal HF's for the rendered string:
// special tokens are matched before NFC, as HF does) and applies the loss rule above.
TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                            const ChatSample& sample, const ChatTemplateKwargs& kwargs,
                            const std::string& where);

}  // namespace dyncp::data
