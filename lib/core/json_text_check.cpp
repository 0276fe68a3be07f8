#include "core/json_text_check.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::core {

namespace {

[[noreturn]] void refuse(std::string_view text, std::size_t offset, const std::string& file,
                         std::int64_t first_line, const std::string& message) {
  if (first_line == 0) throw_data_error(file, message);
  const auto line =
      first_line +
      std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
  throw_data_error(file + ":" + std::to_string(line), message);
}

}  // namespace

void check_json_text(std::string_view text, const std::string& file, std::int64_t first_line) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      refuse(text, i, file, first_line,
             "NUL byte at offset " + std::to_string(i) +
                 " (JSON text never holds one; the file is damaged or not JSON)");
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_nesting_depth) {
        refuse(text, i, file, first_line,
               "JSON nested deeper than " + std::to_string(max_json_nesting_depth) +
                   " levels at offset " + std::to_string(i) + " (no valid input nests this deep)");
      }
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
}

}  // namespace dyncp::core
