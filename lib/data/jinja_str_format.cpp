// Python's str.format (what jinja2's sandbox runs through its SandboxedFormatter): replacement
// fields {name.attr[key]!conversion:spec}, automatic and manual numbering, nested fields in the
// spec, and the format mini-language for str, int and float.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/utf8.hpp"

namespace dyncp::data::jinja {

namespace {

struct Spec {
  char32_t fill = ' ';
  char align = '\0';
  char sign = '-';
  bool alternate = false;
  std::int64_t width = 0;
  char grouping = '\0';
  std::optional<std::int64_t> precision;
  char type = '\0';
};

Spec parse_spec(const std::string& text, int line) {
  Spec spec;
  const std::u32string s = decode(text);
  std::size_t i = 0;
  const auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = static_cast<char>(s[1]);
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = static_cast<char>(s[0]);
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' '))
    spec.sign = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (spec.align == '\0') {
      spec.fill = '0';
      spec.align = '=';
    }
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    spec.width = spec.width * 10 + (s[i++] - '0');
    if (spec.width > 100000000) fail(line, "Too many decimal digits in format string");
  }
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') fail(line, "Format specifier missing precision");
    std::int64_t precision = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      precision = precision * 10 + (s[i++] - '0');
      if (precision > 100000000) fail(line, "Too many decimal digits in format string");
    }
    spec.precision = precision;
  }
  if (i < s.size()) spec.type = static_cast<char>(s[i++]);
  if (i < s.size()) fail(line, "Invalid format specifier '" + text + "'");
  return spec;
}

std::string aligned(const std::string& sign_and_prefix, const std::string& body, const Spec& spec,
                    char default_align) {
  const std::int64_t length = code_point_count(sign_and_prefix) + code_point_count(body);
  const char align = spec.align == '\0' ? default_align : spec.align;
  if (spec.width <= length) return sign_and_prefix + body;
  const auto count = static_cast<std::size_t>(spec.width - length);
  std::string fill;
  for (std::size_t i = 0; i < count; ++i) fill += encode(std::u32string(1, spec.fill));
  if (align == '=') return sign_and_prefix + fill + body;
  if (align == '<') return sign_and_prefix + body + fill;
  if (align == '>') return fill + sign_and_prefix + body;
  const std::size_t left = count / 2;
  std::string left_fill;
  std::string right_fill;
  for (std::size_t i = 0; i < left; ++i) left_fill += encode(std::u32string(1, spec.fill));
  for (std::size_t i = left; i < count; ++i) right_fill += encode(std::u32string(1, spec.fill));
  return left_fill + sign_and_prefix + body + right_fill;
}

std::string group_digits(const std::string& digits, char separator, std::size_t every) {
  if (separator == '\0') return digits;
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % every == 0) out.push_back(separator);
    out.push_back(digits[i]);
  }
  return out;
}

std::string c_format(const char* pattern, int precision, double value) {
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), pattern, precision, value);
  return buffer;
}

// The '' presentation of float with a precision: 'g' that keeps one digit after the point and
// goes scientific from exponent precision - 1.
std::string general_keeping_point(double value, std::int64_t precision) {
  const int p = static_cast<int>(std::max<std::int64_t>(precision, 1));
  const std::string scientific = c_format("%.*e", p - 1, value);
  const int exponent = std::atoi(scientific.c_str() + scientific.find('e') + 1);
  if (exponent < -4 || exponent >= p - 1) {
    std::string mantissa = scientific.substr(0, scientific.find('e'));
    if (mantissa.find('.') != std::string::npos) {
      while (mantissa.back() == '0') mantissa.pop_back();
      if (mantissa.back() == '.') mantissa.pop_back();
    }
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return mantissa + exponent_text;
  }
  std::string fixed = c_format("%.*f", std::max(p - 1 - exponent, 1), value);
  while (fixed.back() == '0' && fixed[fixed.size() - 2] != '.') fixed.pop_back();
  return fixed;
}

std::string format_float(double value, const Spec& spec, int line) {
  const char type = spec.type;
  if (type != '\0' && std::string_view("eEfFgGn%").find(type) == std::string_view::npos)
    fail(line, std::string("Unknown format code '") + type + "' for object of type 'float'");
  const bool negative = std::signbit(value) && !std::isnan(value);
  const double magnitude = std::fabs(value);
  const int precision = static_cast<int>(spec.precision.value_or(6));
  std::string body;
  if (type == '\0') {
    body = spec.precision ? general_keeping_point(magnitude, *spec.precision)
                          : python_float_repr(magnitude);
  } else if (type == '%') {
    body = c_format("%.*f", precision, magnitude * 100) + "%";
  } else {
    const char pattern[] = {'%', '.', '*', type == 'n' ? 'g' : type, '\0'};
    body = c_format(spec.alternate ? (std::string("%#.*") + pattern[3]).c_str() : pattern,
                    precision, magnitude);
  }
  if (spec.grouping != '\0' && std::isfinite(magnitude)) {
    const std::size_t end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, end), spec.grouping, 3) +
           (end == std::string::npos ? "" : body.substr(end));
  }
  const std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  return aligned(sign, body, spec, '>');
}

std::string format_int(std::int64_t value, const Spec& spec, int line) {
  const char type = spec.type;
  if (std::string_view("eEfFgG%").find(type) != std::string_view::npos && type != '\0')
    return format_float(static_cast<double>(value), spec, line);
  if (type != '\0' && std::string_view("dbcoxXn").find(type) == std::string_view::npos)
    fail(line, std::string("Unknown format code '") + type + "' for object of type 'int'");
  if (spec.precision) fail(line, "Precision not allowed in integer format specifier");
  if (type == 'c') {
    std::string character;
    append_utf8(character, static_cast<char32_t>(value));
    return aligned("", character, spec, '<');
  }
  const int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
  const auto magnitude =
      value < 0 ? -static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  std::string digits;
  for (std::uint64_t rest = magnitude; digits.empty() || rest > 0;
       rest /= static_cast<unsigned>(base))
    digits.insert(digits.begin(),
                  (type == 'X' ? "0123456789ABCDEF"
                               : "0123456789abcdef")[rest % static_cast<unsigned>(base)]);
  digits = group_digits(digits, spec.grouping, base == 10 ? 3 : 4);
  std::string prefix = value < 0 ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  if (spec.alternate && base != 10)
    prefix += type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'X' ? "0X" : "0x";
  return aligned(prefix, digits, spec, '>');
}

std::string format_field(const Value& value, const std::string& spec_text, int line) {
  if (spec_text.empty()) return python_str(value);
  const Spec spec = parse_spec(spec_text, line);
  if (value.is_string()) {
    if (spec.type != '\0' && spec.type != 's')
      fail(line, std::string("Unknown format code '") + spec.type + "' for object of type 'str'");
    std::string text = value.text();
    if (spec.precision)
      text = encode(
          std::u32string_view(decode(text)).substr(0, static_cast<std::size_t>(*spec.precision)));
    return aligned("", text, spec, '<');
  }
  if (value.kind() == Value::Kind::integer || value.kind() == Value::Kind::boolean)
    return format_int(value.as_int(), spec, line);
  if (value.kind() == Value::Kind::floating) return format_float(value.as_double(), spec, line);
  fail(line, "unsupported format string passed to " + python_type_name(value) + ".__format__");
}

// field_name: arg_name ("." attribute | "[" key "]")*.
Value resolve_field(const std::string& name, const CallArguments& arguments, std::size_t& next,
                    int& numbering, int line) {
  std::size_t end = name.find_first_of(".[");
  const std::string head = name.substr(0, end);
  Value value;
  if (head.empty() || std::all_of(head.begin(), head.end(), ::isdigit)) {
    const bool automatic = head.empty();
    if (numbering != 0 && numbering != (automatic ? 1 : 2))
      fail(line,
           automatic
               ? "cannot switch from manual field specification to automatic field numbering"
               : "cannot switch from automatic field numbering to manual field specification");
    numbering = automatic ? 1 : 2;
    const std::optional<std::int64_t> manual = automatic ? std::nullopt : parse_decimal(head);
    if (!automatic && !manual) fail(line, "Too many decimal digits in format string");
    const std::size_t index = automatic ? next++ : static_cast<std::size_t>(*manual);
    if (index >= arguments.positional.size())
      fail(line, "Replacement index " + std::to_string(index) +
                     " out of range for positional args tuple");
    value = arguments.positional[index];
  } else {
    bool found = false;
    for (const auto& [key, keyword_value] : arguments.keyword) {
      if (key == head) {
        value = keyword_value;
        found = true;
      }
    }
    if (!found) fail(line, "KeyError: " + python_repr(Value::string(head)));
  }
  while (end != std::string::npos && end < name.size()) {
    if (name[end] == '.') {
      const std::size_t stop = name.find_first_of(".[", end + 1);
      const std::string attribute =
          name.substr(end + 1, stop == std::string::npos ? std::string::npos : stop - end - 1);
      // The sandbox: underscore attributes are undefined.
      value = attribute.starts_with("_") ? Value::undefined_named(attribute)
                                         : get_attribute(value, attribute, line);
      end = stop;
    } else {
      const std::size_t close = name.find(']', end);
      if (close == std::string::npos) fail(line, "Missing ']' in format string");
      const std::string key = name.substr(end + 1, close - end - 1);
      const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
      const std::optional<std::int64_t> index = numeric ? parse_decimal(key) : std::nullopt;
      if (numeric && !index) fail(line, "Too many decimal digits in format string");
      value = get_item(value, numeric ? Value::integer(*index) : Value::string(key), line);
      end = close + 1;
    }
  }
  return value;
}

}  // namespace

std::string python_str_format(const std::string& format, const CallArguments& arguments,
                              bool escape_arguments, int line) {
  std::string out;
  std::size_t next = 0;
  int numbering = 0;  // 1 automatic, 2 manual
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      fail(line, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    // The field up to its matching brace (the spec may hold one level of nested fields).
    std::size_t depth = 1;
    std::size_t j = i + 1;
    for (; j < format.size() && depth > 0; ++j)
      depth += format[j] == '{' ? 1 : format[j] == '}' ? -1 : 0;
    if (depth != 0) fail(line, "Single '{' encountered in format string");
    const std::string field = format.substr(i + 1, j - i - 2);
    i = j - 1;
    std::size_t name_end = field.find_first_of("!:");
    const std::string name = field.substr(0, name_end);
    char conversion = '\0';
    std::string spec;
    if (name_end != std::string::npos && field[name_end] == '!') {
      if (name_end + 1 >= field.size())
        fail(line, "end of string while looking for conversion specifier");
      conversion = field[name_end + 1];
      name_end += 2;
      if (name_end < field.size() && field[name_end] != ':')
        fail(line, "expected ':' after conversion specifier");
    }
    if (name_end != std::string::npos && name_end < field.size() && field[name_end] == ':')
      spec = python_str_format(field.substr(name_end + 1), arguments, false, line);
    Value value = resolve_field(name, arguments, next, numbering, line);
    if (conversion == 'r' || conversion == 'a') {
      value = Value::string(python_repr(value));
    } else if (conversion == 's') {
      value = Value::string(python_str(value));
    } else if (conversion != '\0') {
      fail(line, std::string("Unknown conversion specifier ") + conversion);
    }
    if (escape_arguments && value.is_markup()) {
      if (!spec.empty()) fail(line, "Markup arguments take no format spec");
      out += value.text();
      continue;
    }
    const std::string text = format_field(value, spec, line);
    out += escape_arguments ? escape_html(text) : text;
  }
  return out;
}

}  // namespace dyncp::data::jinja
