#pragma once
// GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE tokens are
// strings of visible characters. Bytes 33-126, 161-172 and 174-255 map to themselves; the other
// 68 bytes (0-32, 127-160, 173), in increasing order, map to U+0100, U+0101, ... (so ' ' -> 'Ġ'
// U+0120, '\n' -> 'Ċ' U+010A).

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace dyncp::data {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  // The UTF-8 encoding of the code point that stands for `byte`.
  const std::string& symbol_for_byte(unsigned char byte) const { return symbols_[byte]; }

  // Maps a token string (mapped characters) back to raw bytes; nullopt if it holds a character
  // outside the alphabet.
  std::optional<std::string> decode_token(std::string_view token) const;

 private:
  std::array<std::string, 256> symbols_;
  std::array<int, 512> byte_for_code_point_{};  // -1 where the code point is not in the alphabet
};

}  // namespace dyncp::data
