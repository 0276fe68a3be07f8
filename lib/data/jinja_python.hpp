#pragma once
// Python's str operations and ordering on interpreter values, shared by the filters, tests,
// methods and globals (jinja_filters*.cpp, jinja_tests.cpp, jinja_methods.cpp,
// jinja_globals.cpp). Strings are UTF-8; positions and lengths count code points, as Python's.
// Internal to the interpreter; errors are TemplateError at `line`.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/jinja_syntax.hpp"

namespace dyncp::data::jinja {

[[noreturn]] void fail(int line, const std::string& message);

std::u32string decode(std::string_view text);
std::string encode(std::u32string_view text);
bool is_ascii(std::string_view text);
// Code points of `text` (Python's len()).
std::int64_t code_point_count(std::string_view text);

// Python's str.isspace set.
bool is_python_space(char32_t c);
// Unicode general category L* (str.isalpha).
bool is_letter(char32_t c);
// Unicode general category Nd (str.isdigit as far as templates see it).
bool is_decimal_digit(char32_t c);

// The string, or a TemplateError naming `what` (an undefined value raises its own error).
const std::string& require_string(const Value& value, const char* what, int line);
// An integer (booleans count), or a TemplateError naming `what`.
std::int64_t require_int(const Value& value, const char* what, int line);
// The argument at `index` / `name`, or `fallback`.
Value argument_or(const CallArguments& arguments, std::size_t index, std::string_view name,
                  Value fallback);

// str.strip / lstrip / rstrip with Python's default (Unicode whitespace) or explicit chars.
std::string strip(const std::string& text, const std::optional<Value>& chars, bool left, bool right,
                  int line);
// str.split(sep, maxsplit).
Value split(const std::string& text, const std::optional<Value>& separator,
            const std::optional<Value>& max_split_value, int line);
// str.upper() / str.lower() (utf8proc's simple case mapping).
std::string map_case(const std::string& text, bool upper);
// str.title().
std::string title_case(const std::string& text);
// str.capitalize().
std::string capitalize(const std::string& text);
// str.startswith / str.endswith with a string or a tuple of strings.
bool starts_or_ends(const std::string& text, const Value& affix, bool starts, int line);
// str.replace(old, new, count); count < 0 replaces every occurrence.
std::string replace_all(const std::string& text, const std::string& old_text,
                        const std::string& new_text, std::int64_t count);

// Python's < (numbers, strings, lists and tuples), for sorting and min/max.
bool python_less(const Value& a, const Value& b, int line);

// Jinja's attribute="a.b.0" lookups of map / selectattr / sort / join / groupby.
Value attribute_path(const Value& item, const std::string& path, int line);

// Decimal digits as an integer; nullopt when empty, not all digits or beyond 64 bits.
std::optional<std::int64_t> parse_decimal(std::string_view digits);

// The arguments without the first `count` positional ones (select('test', arg) -> arg).
CallArguments shifted(const CallArguments& arguments, std::size_t count);

// markupsafe.escape of str(value): & < > " ' as entities.
std::string escape_html(const std::string& text);

}  // namespace dyncp::data::jinja

namespace dyncp::data::jinja {

// Python's `format % arguments` (printf-style): `positional` for a tuple, `mapping` for
// %(name)s specs. `escape_arguments` is Markup's %: str() and repr() of arguments are escaped.
std::string percent_format(const std::string& format, const ValueList& positional,
                           const Value* mapping, bool escape_arguments, int line);

}  // namespace dyncp::data::jinja

namespace dyncp::data::jinja {

// Python's format.format(*positional, **keyword) (jinja_str_format.cpp). `escape_arguments` is
// Markup.format: formatted arguments are escaped unless Markup.
std::string python_str_format(const std::string& format, const CallArguments& arguments,
                              bool escape_arguments, int line);

}  // namespace dyncp::data::jinja
