#pragma once
// UTF-8 helpers shared by the tokenizer and the dataset readers. Input text is validated once,
// where it enters (a JSONL line, a --text-file), so the BPE and NFC code can assume valid UTF-8.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dyncp::data {

// Byte offset of the first ill-formed sequence (overlong forms, surrogates and code points past
// U+10FFFF are ill-formed), or nullopt when `text` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// Throws a data error naming `where` and the byte offset when `text` is not valid UTF-8.
void require_valid_utf8(std::string_view text, const std::string& where);

// Appends the UTF-8 encoding of `code_point` (must be <= U+10FFFF).
void append_utf8(std::string& out, char32_t code_point);

// Decodes the code point starting at `text[offset]` (valid UTF-8 assumed) and advances offset.
char32_t next_code_point(std::string_view text, std::size_t& offset);

}  // namespace dyncp::data
