#include "data/chat_template.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::data {

namespace {

using jinja::Dict;
using jinja::Value;

bool is_turn_whitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string role_of(const Value& message) {
  const Value* role = message.is_dict() ? message.dict_ptr()->find("role") : nullptr;
  return role != nullptr && role->is_string() ? role->text() : std::string();
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer(const Tokenizer& tokenizer, const std::string& where) {
  if (tokenizer.chat_template().empty()) {
    core::throw_data_error(where,
                           "the tokenizer has no chat template (tokenizer_config.json "
                           "\"chat_template\" or chat_template.jinja); chat data needs one, or "
                           "use token-id JSONL (docs/data.md)");
  }
  ChatTemplate result = from_source(tokenizer.chat_template(), tokenizer, where);
  if (!tokenizer.tool_use_chat_template().empty()) {
    result.tool_use_template_ =
        jinja::Template::parse(tokenizer.tool_use_chat_template(), where + " (tool_use template)");
  }
  return result;
}

ChatTemplate ChatTemplate::from_source(const std::string& source, const Tokenizer& tokenizer,
                                       const std::string& where) {
  ChatTemplate result;
  result.template_ = jinja::Template::parse(source, where);
  result.special_tokens_ = tokenizer.named_special_tokens();
  for (const AddedToken& token : tokenizer.added_tokens())
    result.added_tokens_.push_back(token.content);
  return result;
}

jinja::RenderedTemplate ChatTemplate::render_raw(const Value& messages, const ChatSample& sample,
                                                 const ChatTemplateKwargs& kwargs,
                                                 bool generation_prompt,
                                                 const std::string& where) const {
  Dict variables;
  variables.set("messages", messages);
  variables.set("tools", sample.tools.is_undefined() ? Value::none() : sample.tools);
  variables.set("documents", sample.documents.is_undefined() ? Value::none() : sample.documents);
  variables.set("add_generation_prompt", Value::boolean(generation_prompt));
  for (const auto& [name, token] : special_tokens_) variables.set(name, Value::string(token));
  // The sample's own kwargs after the dataset's, so they win.
  for (const ChatTemplateKwargs* list : {&kwargs, &sample.template_kwargs}) {
    for (const auto& [name, value] : *list) {
      if (name != "add_generation_prompt") variables.set(name, value);
    }
  }
  const bool with_tools = !sample.tools.is_undefined() && !sample.tools.is_none();
  if (with_tools && tool_use_template_) return tool_use_template_->render(variables, where);
  return template_.render(variables, where);
}

std::size_t ChatTemplate::shared_length(std::string_view a, std::string_view b) const {
  std::size_t length = 0;
  while (length < std::min(a.size(), b.size()) && a[length] == b[length]) ++length;
  // Cut back so that no added token of either text is split ("<|end|>\n<|" is shared by
  // "<|endoftext|>" and "<|assistant|>").
  for (bool moved = true; moved;) {
    moved = false;
    for (const std::string_view text : {a, b}) {
      for (const std::string& token : added_tokens_) {
        for (std::size_t at = text.find(token); at != std::string_view::npos && at < length;
             at = text.find(token, at + 1)) {
          if (length < at + token.size()) {
            length = at;
            moved = true;
          }
        }
      }
    }
  }
  return length;
}

std::string ChatTemplate::assistant_header(const ChatSample& sample,
                                           const ChatTemplateKwargs& kwargs,
                                           const std::string& where) const {
  // The generation prompt after the messages before an assistant turn: what the rendering
  // with add_generation_prompt writes after the text it shares with the rendering without.
  // Usually the one extends the other; templates that end an unprompted conversation with a
  // token (Phi-3.5 and Phi-4 end it with eos) part where that token starts. The first
  // assistant turn whose prefix the template accepts decides.
  const auto& messages = sample.messages.items();
  for (std::size_t index = 1; index < messages.size(); ++index) {
    if (role_of(messages[index]) != "assistant") continue;
    const Value prefix = Value::list(jinja::ValueList(messages.begin(), messages.begin() + index));
    try {
      const std::string without = render_raw(prefix, sample, kwargs, false, where).text;
      const std::string with = render_raw(prefix, sample, kwargs, true, where).text;
      return with.substr(shared_length(with, without));
    } catch (const core::Error&) {
      // The template refuses this prefix (e.g. it must end with a user turn); try the next.
    }
  }
  core::throw_data_error(where,
                         "cannot tell the assistant header from the chat template: no prefix of "
                         "this conversation before an assistant turn renders with "
                         "add_generation_prompt; give the template {% generation %} blocks");
}

RenderedChat ChatTemplate::render(const ChatSample& sample, const ChatTemplateKwargs& kwargs,
                                  const std::string& where) const {
  bool generation_prompt = false;
  for (const ChatTemplateKwargs* list : {&kwargs, &sample.template_kwargs}) {
    for (const auto& [name, value] : *list) {
      if (name == "add_generation_prompt") generation_prompt = value.truthy();
    }
  }
  jinja::RenderedTemplate rendered =
      render_raw(sample.messages, sample, kwargs, generation_prompt, where);
  RenderedChat result;
  result.text = std::move(rendered.text);
  const bool with_tools = !sample.tools.is_undefined() && !sample.tools.is_none();
  const jinja::Template& used = with_tools && tool_use_template_ ? *tool_use_template_ : template_;
  if (used.has_generation_blocks()) {
    result.from_generation_blocks = true;
    for (const auto& [begin, end] : rendered.generation_spans) {
      if (end > begin) result.loss_ranges.emplace_back(begin, end);
    }
    return result;
  }
  std::vector<const Dict*> assistant_messages;
  for (const Value& message : sample.messages.items()) {
    if (role_of(message) == "assistant") assistant_messages.push_back(message.dict_ptr().get());
  }
  std::string header;
  bool header_known = false;
  for (const auto& span : rendered.loop_item_spans) {
    if (span.end <= span.begin || std::find(assistant_messages.begin(), assistant_messages.end(),
                                            span.item) == assistant_messages.end()) {
      continue;
    }
    if (!header_known) {
      header = assistant_header(sample, kwargs, where);
      header_known = true;
    }
    std::size_t begin = span.begin;
    std::size_t end = span.end;
    while (end > begin && is_turn_whitespace(result.text[end - 1])) --end;
    const std::string_view turn(result.text.data() + begin, end - begin);
    if (turn.starts_with(header)) {
      begin += header.size();
    } else {
      // The longest start of the header this turn has that ends at a newline or special token.
      for (std::size_t length = std::min(header.size(), turn.size()); length > 0; --length) {
        const std::string_view part(header.data(), length);
        if (!turn.starts_with(part)) continue;
        const bool at_boundary =
            part.back() == '\n' ||
            std::any_of(added_tokens_.begin(), added_tokens_.end(),
                        [&](const std::string& token) { return part.ends_with(token); });
        if (at_boundary) {
          begin += length;
          break;
        }
      }
    }
    if (end > begin) result.loss_ranges.emplace_back(begin, end);
  }
  std::sort(result.loss_ranges.begin(), result.loss_ranges.end());
  return result;
}

TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                            const ChatSample& sample, const ChatTemplateKwargs& kwargs,
                            const std::string& where) {
  const RenderedChat rendered = chat_template.render(sample, kwargs, where);
  const Encoding encoding = tokenizer.encode_with_offsets(rendered.text, where);
  TokenizedChat result;
  result.tokens = encoding.ids;
  result.loss_mask.assign(encoding.ids.size(), 0);
  std::size_t range = 0;
  const auto& ranges = rendered.loss_ranges;
  for (std::size_t i = 0; i < encoding.ids.size(); ++i) {
    const std::size_t start = encoding.offsets[i];
    const std::size_t end =
        i + 1 < encoding.ids.size() ? encoding.offsets[i + 1] : rendered.text.size();
    if (rendered.from_generation_blocks) {
      // transformers: every token overlapping a generation block.
      while (range < ranges.size() && start >= ranges[range].second) ++range;
      if (range < ranges.size() && end > ranges[range].first) result.loss_mask[i] = 1;
    } else {
      while (range < ranges.size() && ranges[range].second <= start) ++range;
      if (range < ranges.size() && start >= ranges[range].first) result.loss_mask[i] = 1;
    }
  }
  return result;
}

}  // namespace dyncp::data
