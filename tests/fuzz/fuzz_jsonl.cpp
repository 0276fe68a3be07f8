// libFuzzer target: one JSONL line as a chat sample (rendered with the demo tokenizer's Qwen3
// template) and as a token-id sample. Any input must end in a result or a core::Error of kind
// data, never a crash, hang or other exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "data/chat_json.hpp"
#include "data/chat_template.hpp"
#include "data/dataset_source.hpp"

#ifndef DYNCP_FUZZ_TOKENIZER_DIR
#define DYNCP_FUZZ_TOKENIZER_DIR "tests/fixtures/data/demo/tokenizer"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dyncp::data::Tokenizer tokenizer =
      dyncp::data::Tokenizer::from_directory(DYNCP_FUZZ_TOKENIZER_DIR);
  static const dyncp::data::ChatTemplate chat_template =
      dyncp::data::ChatTemplate::from_tokenizer(tokenizer, "fuzz");
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  try {
    const auto sample = dyncp::data::parse_chat_sample(line, "fuzz:1");
    const auto rendered = chat_template.render(sample, {}, "fuzz:1");
    for (const auto& [begin, end] : rendered.loss_ranges) {
      if (begin > end || end > rendered.text.size()) __builtin_trap();
    }
  } catch (const dyncp::core::Error& error) {
    if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  try {
    const auto record = dyncp::data::parse_token_record(line, "fuzz:1", 1000);
    if (record.tokens.size() != record.target_mask.size()) __builtin_trap();
  } catch (const dyncp::core::Error& error) {
    if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  return 0;
}
