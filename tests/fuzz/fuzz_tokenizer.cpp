// libFuzzer target: arbitrary bytes through the demo tokenizer (the Qwen3 regex and NFC with a
// small vocabulary). Valid UTF-8 must round-trip: decode(encode(x)) == NFC(x); invalid UTF-8
// must be a data error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "data/tokenizer.hpp"
#include "data/utf8.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dyncp::data::Tokenizer tokenizer =
      dyncp::data::Tokenizer::from_directory(DYNCP_FUZZ_TOKENIZER_DIR);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = !dyncp::data::find_invalid_utf8(text).has_value();
  try {
    const auto ids = tokenizer.encode(text, "fuzz");
    if (!valid) __builtin_trap();
    if (tokenizer.decode(ids) != tokenizer.normalize(text)) __builtin_trap();
  } catch (const dyncp::core::Error& error) {
    if (valid || error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  return 0;
}
