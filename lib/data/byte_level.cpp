#include "data/byte_level.hpp"

#include "data/utf8.hpp"

namespace dyncp::data {

namespace {
bool maps_to_itself(int byte) {
  return (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174);
}
}  // namespace

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_for_code_point_.fill(-1);
  char32_t next_shifted = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t code_point = maps_to_itself(byte) ? static_cast<char32_t>(byte) : next_shifted++;
    append_utf8(symbols_[byte], code_point);
    byte_for_code_point_[code_point] = byte;
  }
}

std::optional<std::string> ByteLevelAlphabet::decode_token(std::string_view token) const {
  std::string bytes;
  bytes.reserve(token.size());
  std::size_t offset = 0;
  while (offset < token.size()) {
    const char32_t code_point = next_code_point(token, offset);
    if (code_point >= byte_for_code_point_.size() || byte_for_code_point_[code_point] < 0) {
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(byte_for_code_point_[code_point]));
  }
  return bytes;
}

}  // namespace dyncp::data
