#pragma once
// Python's multi-character case mappings (generated into jinja_special_casing.cpp by
// tools/golden/data/make_special_casing.py). Internal to the interpreter's case mapping.

#include <string_view>

namespace dyncp::data::jinja {

struct SpecialCasing {
  char32_t code_point;
  std::string_view upper;  // UTF-8 of str.upper()
  std::string_view lower;
  std::string_view title;
};

// The entry for `c`, or null when its mappings are single characters (utf8proc's).
const SpecialCasing* special_casing(char32_t c);

}  // namespace dyncp::data::jinja
