#include "data/utf8.hpp"

#include "core/error.hpp"

namespace dyncp::data {

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t size = text.size();
  std::size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    char32_t minimum = 0;
    char32_t code_point = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2, minimum = 0x80, code_point = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, minimum = 0x800, code_point = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, minimum = 0x10000, code_point = lead & 0x07;
    } else {
      return i;
    }
    if (i + length > size) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned char continuation = bytes[i + k];
      if ((continuation & 0xC0) != 0x80) return i;
      code_point = (code_point << 6) | (continuation & 0x3F);
    }
    if (code_point < minimum || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return i;
    }
    i += length;
  }
  return std::nullopt;
}

void require_valid_utf8(std::string_view text, const std::string& where) {
  if (const auto offset = find_invalid_utf8(text)) {
    core::throw_data_error(where, "invalid UTF-8 at byte " + std::to_string(*offset) +
                                      "; the text must be UTF-8 encoded");
  }
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

char32_t next_code_point(std::string_view text, std::size_t& offset) {
  const auto lead = static_cast<unsigned char>(text[offset]);
  std::size_t length = 1;
  char32_t code_point = lead;
  if (lead >= 0xF0) {
    length = 4, code_point = lead & 0x07;
  } else if (lead >= 0xE0) {
    length = 3, code_point = lead & 0x0F;
  } else if (lead >= 0xC0) {
    length = 2, code_point = lead & 0x1F;
  }
  for (std::size_t k = 1; k < length && offset + k < text.size(); ++k) {
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[offset + k]) & 0x3F);
  }
  offset += length;
  return code_point;
}

}  // namespace dyncp::data
