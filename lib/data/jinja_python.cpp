#include "data/jinja_python.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "data/jinja_builtins.hpp"
#include "data/jinja_special_casing.hpp"
#include "data/utf8.hpp"

namespace dyncp::data::jinja {

void fail(int line, const std::string& message) {
  throw TemplateError(line, message);
}

// Python's str.isspace set.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  std::size_t offset = 0;
  while (offset < text.size()) out.push_back(next_code_point(text, offset));
  return out;
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (static_cast<unsigned char>(c) & 0x80) == 0; });
}

const std::string& require_string(const Value& value, const char* what, int line) {
  if (!value.is_string()) {
    if (value.is_undefined()) throw_undefined(value, line);
    fail(line, std::string(what) + " needs a string, got " + python_type_name(value));
  }
  return value.text();
}

std::int64_t require_int(const Value& value, const char* what, int line) {
  if (value.kind() != Value::Kind::integer && value.kind() != Value::Kind::boolean)
    fail(line, std::string(what) + " needs an integer, got " + python_type_name(value));
  return value.as_int();
}

// str.strip / lstrip / rstrip with Python's default (Unicode whitespace) or explicit chars.
std::string strip(const std::string& text, const std::optional<Value>& chars, bool left, bool right,
                  int line) {
  std::u32string strip_set;
  const bool default_set = !chars || chars->is_none();
  if (!default_set) strip_set = decode(require_string(*chars, "strip()", line));
  const auto stripped = [&](char32_t c) {
    return default_set ? is_python_space(c) : strip_set.find(c) != std::u32string::npos;
  };
  const std::u32string code_points = decode(text);
  std::size_t begin = 0;
  std::size_t end = code_points.size();
  if (left) {
    while (begin < end && stripped(code_points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && stripped(code_points[end - 1])) --end;
  }
  return encode(std::u32string_view(code_points).substr(begin, end - begin));
}

Value split(const std::string& text, const std::optional<Value>& separator,
            const std::optional<Value>& max_split_value, int line) {
  const std::int64_t max_split =
      max_split_value ? require_int(*max_split_value, "split()", line) : -1;
  ValueList parts;
  if (!separator || separator->is_none()) {
    const std::u32string code_points = decode(text);
    std::size_t i = 0;
    std::int64_t splits = 0;
    while (i < code_points.size()) {
      while (i < code_points.size() && is_python_space(code_points[i])) ++i;
      if (i >= code_points.size()) break;
      if (max_split >= 0 && splits == max_split) {
        std::size_t end = code_points.size();
        while (end > i && is_python_space(code_points[end - 1])) --end;
        parts.push_back(Value::string(encode(std::u32string_view(code_points).substr(i, end - i))));
        break;
      }
      const std::size_t start = i;
      while (i < code_points.size() && !is_python_space(code_points[i])) ++i;
      parts.push_back(
          Value::string(encode(std::u32string_view(code_points).substr(start, i - start))));
      ++splits;
    }
    return Value::list(std::move(parts));
  }
  const std::string& sep = require_string(*separator, "split()", line);
  if (sep.empty()) fail(line, "split(): empty separator");
  std::size_t start = 0;
  std::int64_t splits = 0;
  while (true) {
    const std::size_t found =
        (max_split >= 0 && splits == max_split) ? std::string::npos : text.find(sep, start);
    if (found == std::string::npos) {
      parts.push_back(Value::string(text.substr(start)));
      break;
    }
    parts.push_back(Value::string(text.substr(start, found - start)));
    start = found + sep.size();
    ++splits;
  }
  return Value::list(std::move(parts));
}

namespace {

// Python's cased characters (Lowercase, Uppercase or Lt) and case-ignorable ones, for title()
// and the Final_Sigma rule of lower().
bool is_cased(char32_t c) {
  const auto code = static_cast<utf8proc_int32_t>(c);
  const auto category = utf8proc_category(code);
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT || utf8proc_toupper(code) != code ||
         utf8proc_tolower(code) != code;
}

bool is_case_ignorable(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  if (category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_ME ||
      category == UTF8PROC_CATEGORY_CF || category == UTF8PROC_CATEGORY_LM ||
      category == UTF8PROC_CATEGORY_SK)
    return true;
  static const char32_t word_middles[] = {0x27,   0x2e,   0x3a,   0xb7,   0x387,  0x5f4,
                                          0x2018, 0x2019, 0x2024, 0x2027, 0xfe13, 0xfe52,
                                          0xfe55, 0xff07, 0xff0e, 0xff1a};
  return std::find(std::begin(word_middles), std::end(word_middles), c) != std::end(word_middles);
}

enum class Case { upper, lower, title };

// One character's full mapping (SpecialCasing first); a capital sigma lower-cases to the final
// form at the end of a word.
void append_mapped(std::string& out, const std::u32string& text, std::size_t i, Case mode) {
  const char32_t c = text[i];
  if (const SpecialCasing* special = special_casing(c)) {
    out += mode == Case::upper   ? special->upper
           : mode == Case::lower ? special->lower
                                 : special->title;
    return;
  }
  const auto code = static_cast<utf8proc_int32_t>(c);
  if (mode == Case::lower && c == 0x3a3) {
    std::size_t before = i;
    while (before > 0 && is_case_ignorable(text[before - 1])) --before;
    std::size_t after = i + 1;
    while (after < text.size() && is_case_ignorable(text[after])) ++after;
    const bool final =
        before > 0 && is_cased(text[before - 1]) && !(after < text.size() && is_cased(text[after]));
    append_utf8(out, final ? 0x3c2 : 0x3c3);
    return;
  }
  const utf8proc_int32_t mapped = mode == Case::upper   ? utf8proc_toupper(code)
                                  : mode == Case::lower ? utf8proc_tolower(code)
                                                        : utf8proc_totitle(code);
  append_utf8(out, static_cast<char32_t>(mapped));
}

}  // namespace

std::string map_case(const std::string& text, bool upper) {
  if (is_ascii(text)) {  // the common case, without decoding (and without the C locale)
    std::string out = text;
    for (char& c : out) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  const std::u32string code_points = decode(text);
  std::string out;
  for (std::size_t i = 0; i < code_points.size(); ++i)
    append_mapped(out, code_points, i, upper ? Case::upper : Case::lower);
  return out;
}

bool is_letter(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
}

// str.title: title case after an uncased character, lower case after a cased one.
std::string title_case(const std::string& text) {
  const std::u32string code_points = decode(text);
  std::string out;
  bool previous_cased = false;
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    append_mapped(out, code_points, i, previous_cased ? Case::lower : Case::title);
    previous_cased = is_cased(code_points[i]);
  }
  return out;
}

bool starts_or_ends(const std::string& text, const Value& affix, bool starts, int line) {
  if (affix.is_list() && affix.is_tuple()) {
    for (const Value& item : affix.items()) {
      if (starts_or_ends(text, item, starts, line)) return true;
    }
    return false;
  }
  const std::string& piece = require_string(affix, starts ? "startswith()" : "endswith()", line);
  return starts ? text.starts_with(piece) : text.ends_with(piece);
}

std::string replace_all(const std::string& text, const std::string& old_text,
                        const std::string& new_text, std::int64_t count) {
  if (old_text.empty()) {
    // Python inserts the replacement between every character (and at both ends).
    const std::u32string code_points = decode(text);
    std::string out;
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= code_points.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      if (i < code_points.size()) append_utf8(out, code_points[i]);
    }
    return out;
  }
  std::string out;
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t found = text.find(old_text, start);
    if (found == std::string::npos) break;
    out.append(text, start, found - start);
    out += new_text;
    start = found + old_text.size();
    ++done;
  }
  out.append(text, start, std::string::npos);
  return out;
}

// Python < for sorting and min/max.
bool python_less(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.text() < b.text();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (python_less(x[i], y[i], line)) return true;
      if (python_less(y[i], x[i], line)) return false;
    }
    return x.size() < y.size();
  }
  fail(line, "'<' not supported between instances of '" + python_type_name(a) + "' and '" +
                 python_type_name(b) + "'");
}

// attribute="a.b" lookups of map / selectattr / sort / join.
Value attribute_path(const Value& item, const std::string& path, int line) {
  Value current = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    const std::optional<std::int64_t> index = numeric ? parse_decimal(part) : std::nullopt;
    if (numeric && !index) return Value::undefined_named(part);  // no list is that long
    current = numeric ? get_item(current, Value::integer(*index), line)
                      : get_item(current, Value::string(part), line);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

CallArguments shifted(const CallArguments& arguments, std::size_t count) {
  CallArguments rest;
  for (std::size_t i = count; i < arguments.positional.size(); ++i)
    rest.positional.push_back(arguments.positional[i]);
  rest.keyword = arguments.keyword;
  return rest;
}

std::optional<std::int64_t> parse_decimal(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  std::int64_t value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value))
      return std::nullopt;
  }
  return value;
}

std::int64_t code_point_count(std::string_view text) {
  if (is_ascii(text)) return static_cast<std::int64_t>(text.size());
  std::int64_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xc0) != 0x80 ? 1 : 0;
  return count;
}

bool is_decimal_digit(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
}

Value argument_or(const CallArguments& arguments, std::size_t index, std::string_view name,
                  Value fallback) {
  std::optional<Value> found = arguments.get(index, name);
  return found ? std::move(*found) : std::move(fallback);
}

// str.capitalize: the first character in title case, the rest in lower case.
std::string capitalize(const std::string& text) {
  const std::u32string code_points = decode(text);
  std::string out;
  for (std::size_t i = 0; i < code_points.size(); ++i)
    append_mapped(out, code_points, i, i == 0 ? Case::title : Case::lower);
  return out;
}

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace dyncp::data::jinja

namespace dyncp::data::jinja {

namespace {

struct FormatSpec {
  std::string flags;
  std::optional<std::int64_t> width;
  std::optional<std::int64_t> precision;
  char conversion = 's';
};

std::string pad(std::string text, const FormatSpec& spec) {
  const std::int64_t length = code_point_count(text);
  if (!spec.width || *spec.width <= length) return text;
  const std::string fill(static_cast<std::size_t>(*spec.width - length), ' ');
  return spec.flags.find('-') != std::string::npos ? text + fill : fill + text;
}

std::string printf_one(const FormatSpec& spec, const char* length_modifier, auto value) {
  std::string pattern = "%" + spec.flags;
  if (spec.width) pattern += std::to_string(*spec.width);
  if (spec.precision) pattern += "." + std::to_string(*spec.precision);
  pattern += length_modifier;
  pattern.push_back(spec.conversion);
  const int size = std::snprintf(nullptr, 0, pattern.c_str(), value);
  std::string out(static_cast<std::size_t>(size) + 1, '\0');
  std::snprintf(out.data(), out.size(), pattern.c_str(), value);
  out.resize(static_cast<std::size_t>(size));
  return out;
}

std::string format_one(const FormatSpec& spec, const Value& argument, bool escape_arguments,
                       int line) {
  const char c = spec.conversion;
  if (c == 's' || c == 'r' || c == 'a') {
    std::string text = c == 's' ? python_str(argument) : python_repr(argument);
    if (escape_arguments && !argument.is_markup()) text = escape_html(text);
    if (spec.precision)
      text = encode(
          std::u32string_view(decode(text))
              .substr(0, static_cast<std::size_t>(std::max<std::int64_t>(0, *spec.precision))));
    return pad(std::move(text), spec);
  }
  if (c == 'c') {
    std::string text;
    if (argument.kind() == Value::Kind::integer) {
      append_utf8(text, static_cast<char32_t>(argument.as_int()));
    } else if (argument.is_string() && code_point_count(argument.text()) == 1) {
      text = argument.text();
    } else {
      fail(line, "%c requires an int or a unicode character, not " + python_type_name(argument));
    }
    return pad(std::move(text), spec);
  }
  const bool integer_conversion = std::string_view("diuxXo").find(c) != std::string_view::npos;
  if (!argument.is_number() || argument.kind() == Value::Kind::big_integer) {
    fail(line, std::string("%") + c + " format: a real number is required, not " +
                   python_type_name(argument));
  }
  if (integer_conversion) {
    if (argument.kind() == Value::Kind::floating && c != 'd' && c != 'i' && c != 'u')
      fail(line, std::string("%") + c + " format: an integer is required, not float");
    if (spec.flags.find('#') != std::string::npos && c == 'o') {
      // Python spells the alternate octal form 0o17; printf 017.
      FormatSpec plain = spec;
      std::erase(plain.flags, '#');
      plain.width.reset();
      const long long value = static_cast<long long>(argument.as_int());
      std::string digits = printf_one(plain, "ll", value < 0 ? -value : value);
      digits.insert(digits.find_first_not_of("+ "), "0o");
      FormatSpec padded = spec;
      std::erase(padded.flags, '#');
      return pad((value < 0 ? "-" : "") + digits, padded);
    }
    const long long value = argument.kind() == Value::Kind::floating
                                ? static_cast<long long>(std::trunc(argument.as_double()))
                                : static_cast<long long>(argument.as_int());
    FormatSpec integer_spec = spec;
    if (c == 'i' || c == 'u') integer_spec.conversion = 'd';
    if ((c == 'x' || c == 'X' || c == 'o') && value < 0) {
      // printf prints the two's complement; Python a minus sign.
      FormatSpec positive = integer_spec;
      positive.width.reset();
      return pad("-" + printf_one(positive, "ll", -value), spec);
    }
    return printf_one(integer_spec, "ll", value);
  }
  if (std::string_view("eEfFgG").find(c) == std::string_view::npos)
    fail(line, std::string("unsupported format character '") + c + "'");
  return printf_one(spec, "", argument.as_double());
}

}  // namespace

std::string percent_format(const std::string& format, const ValueList& positional,
                           const Value* mapping, bool escape_arguments, int line) {
  std::string out;
  std::size_t next = 0;
  bool used_mapping = false;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) fail(line, "incomplete format");
    std::optional<std::string> key;
    if (format[i] == '(') {
      int depth = 1;
      const std::size_t start = ++i;
      while (i < format.size() && depth > 0) {
        depth += format[i] == '(' ? 1 : format[i] == ')' ? -1 : 0;
        if (depth > 0) ++i;
      }
      if (i >= format.size()) fail(line, "incomplete format key");
      key = format.substr(start, i - start);
      ++i;
    }
    FormatSpec spec;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
      spec.flags.push_back(format[i++]);
    const auto number = [&]() -> std::optional<std::int64_t> {
      if (i < format.size() && format[i] == '*') {  // the width or precision is an argument
        ++i;
        if (mapping != nullptr || next >= positional.size()) fail(line, "* wants int");
        const Value& value = positional[next++];
        if (value.kind() != Value::Kind::integer) fail(line, "* wants int");
        return value.as_int();
      }
      if (i >= format.size() || !std::isdigit(static_cast<unsigned char>(format[i])))
        return std::nullopt;
      std::int64_t value = 0;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        value = value * 10 + (format[i++] - '0');
        if (value > 100000000) fail(line, "width or precision too big in a format string");
      }
      return value;
    };
    spec.width = number();
    if (spec.width && *spec.width < 0) {  // a negative * width left-justifies
      spec.flags.push_back('-');
      spec.width = -*spec.width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = number().value_or(0);
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) fail(line, "incomplete format");
    spec.conversion = format[i];
    if (spec.conversion == '%') {
      out.push_back('%');
      continue;
    }
    Value argument;
    if (key) {
      if (mapping == nullptr || !mapping->is_dict()) fail(line, "format requires a mapping");
      const Value* found = mapping->dict_ptr()->find(*key);
      if (found == nullptr) fail(line, "KeyError: " + python_repr(Value::string(*key)));
      argument = *found;
      used_mapping = true;
    } else if (mapping != nullptr && positional.empty()) {
      if (next++ > 0) fail(line, "not enough arguments for format string");
      argument = *mapping;
    } else {
      if (next >= positional.size()) fail(line, "not enough arguments for format string");
      argument = positional[next++];
    }
    out += format_one(spec, argument, escape_arguments, line);
  }
  if (!used_mapping && mapping == nullptr && next < positional.size())
    fail(line, "not all arguments converted during string formatting");
  return out;
}

}  // namespace dyncp::data::jinja
