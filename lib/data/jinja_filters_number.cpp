// Number filters: jinja2.filters' do_abs, do_int, do_float, do_round, do_filesizeformat.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

Value abs(const Value& v, const CallArguments&, int line) {
  if (v.kind() == Value::Kind::floating) return Value::floating(std::fabs(v.as_double()));
  if (v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean)
    return Value::integer(std::llabs(v.as_int()));
  fail(line, "bad operand type for abs(): '" + python_type_name(v) + "'");
}

// Python's float(text): surrounding whitespace, underscores between digits, inf / nan; no hex.
std::optional<double> parse_python_float(const std::string& raw, int line) {
  const std::string stripped = strip(raw, std::nullopt, true, true, line);
  std::string text;
  for (std::size_t i = 0; i < stripped.size(); ++i) {
    if (stripped[i] == '_') {
      const bool between = i > 0 && i + 1 < stripped.size() &&
                           std::isdigit(static_cast<unsigned char>(stripped[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(stripped[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    text.push_back(stripped[i]);
  }
  if (text.empty() || text.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  try {
    std::size_t used = 0;
    const double parsed = std::stod(text, &used);
    if (used == text.size()) return parsed;
  } catch (const std::out_of_range&) {
    return text.find_first_of("eE") != std::string::npos && text.find("e-") == std::string::npos &&
                   text.find("E-") == std::string::npos
               ? std::optional<double>(text.front() == '-' ? -HUGE_VAL : HUGE_VAL)
               : std::optional<double>(0.0);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Python's int(text, base): sign, 0x / 0o / 0b prefixes (base 0 reads them; 16, 8 and 2 allow
// theirs), underscores between digits. nullopt where Python raises ValueError.
std::optional<std::int64_t> parse_python_int(const std::string& text, std::int64_t base) {
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  const auto prefix = [&](char letter) {
    return i + 1 < text.size() && text[i] == '0' &&
           std::tolower(static_cast<unsigned char>(text[i + 1])) == letter;
  };
  bool prefixed = false;
  for (const auto& [letter, radix] : {std::pair{'x', 16}, {'o', 8}, {'b', 2}}) {
    if ((base == 0 || base == radix) && prefix(letter)) {
      base = radix;
      i += 2;
      prefixed = true;
    }
  }
  const bool leading_zero_decimal = base == 0;
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return std::nullopt;
  std::int64_t value = 0;
  std::size_t digits = 0;
  bool nonzero = false;
  for (; i < text.size(); ++i) {
    if (text[i] == '_' && (digits > 0 || prefixed) && i + 1 < text.size() && text[i + 1] != '_')
      continue;
    const int c = std::tolower(static_cast<unsigned char>(text[i]));
    const int digit = std::isdigit(c) ? c - '0' : std::isalpha(c) ? c - 'a' + 10 : 99;
    if (digit >= base) return std::nullopt;
    nonzero = nonzero || digit != 0;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit, &value))
      return std::nullopt;
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  // int("010", 0) is an error: base 0 reads no leading zeros.
  if (leading_zero_decimal && !prefixed && digits > 1 && text[negative || text[0] == '+'] == '0' &&
      nonzero)
    return std::nullopt;
  return negative ? -value : value;
}

Value int_filter(const Value& input, const CallArguments& arguments, int line) {
  const Value fallback = argument_or(arguments, 0, "default", Value::integer(0));
  const std::int64_t base =
      require_int(argument_or(arguments, 1, "base", Value::integer(10)), "int(base)", line);
  switch (input.kind()) {
    case Value::Kind::integer:
    case Value::Kind::big_integer:
      return input;
    case Value::Kind::boolean:
      return Value::integer(input.as_int());
    case Value::Kind::floating:
      return std::isfinite(input.as_double())
                 ? Value::integer(static_cast<std::int64_t>(std::trunc(input.as_double())))
                 : fallback;
    case Value::Kind::string: {
      const std::string text = strip(input.text(), std::nullopt, true, true, line);
      if (const auto parsed = parse_python_int(text, base)) return Value::integer(*parsed);
      // jinja2: "42.23"|int is 42, through float().
      const std::optional<double> number = parse_python_float(text, line);
      if (number && std::isfinite(*number))
        return Value::integer(static_cast<std::int64_t>(std::trunc(*number)));
      return fallback;
    }
    default:
      return fallback;
  }
}

Value float_filter(const Value& input, const CallArguments& arguments, int line) {
  const Value fallback = argument_or(arguments, 0, "default", Value::floating(0.0));
  if (input.is_number()) return Value::floating(input.as_double());
  if (input.is_string()) {
    if (const auto parsed = parse_python_float(input.text(), line)) return Value::floating(*parsed);
  }
  return fallback;
}

Value round(const Value& v, const CallArguments& a, int line) {
  const std::int64_t precision =
      require_int(argument_or(a, 0, "precision", Value::integer(0)), "round()", line);
  const std::string method = python_str(argument_or(a, 1, "method", Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    fail(line, "method must be common, ceil or floor");
  if (!v.is_number() || v.kind() == Value::Kind::big_integer)
    fail(line, "round needs a number, got " + python_type_name(v));
  // Python's round(int, n) is an int: the int itself for n >= 0, else to a multiple of 10^-n
  // with halves to even.
  if (method == "common" && v.kind() != Value::Kind::floating) {
    if (precision >= 0) return Value::integer(v.as_int());
    if (precision < -18) return Value::integer(0);
    std::int64_t unit = 1;
    for (std::int64_t i = 0; i < -precision; ++i) unit *= 10;
    const std::int64_t x = v.as_int();
    std::int64_t low = x / unit * unit;
    if (x < 0 && low != x) low -= unit;  // floor to the multiple below
    const std::int64_t rest = x - low;
    const bool up = 2 * rest > unit || (2 * rest == unit && (low / unit) % 2 != 0);
    return Value::integer(up ? low + unit : low);
  }
  if (method == "common" && precision > 323) return Value::floating(v.as_double());  // CPython
  if (method == "common" && precision >= 0) {
    // Python's round(x, n) is x correctly rounded to n decimals (halves to even on the exact
    // binary value), read back: what glibc's printf and strtod compute.
    const int digits = static_cast<int>(precision);
    const int size = std::snprintf(nullptr, 0, "%.*f", digits, v.as_double());
    std::string buffer(static_cast<std::size_t>(size) + 1, '\0');
    std::snprintf(buffer.data(), buffer.size(), "%.*f", digits, v.as_double());
    return Value::floating(std::strtod(buffer.c_str(), nullptr));
  }
  if (method == "common" && precision < -308) return Value::floating(0.0 * v.as_double());
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  const double rounded = method == "ceil"    ? std::ceil(x)
                         : method == "floor" ? std::floor(x)
                                             : std::nearbyint(x);
  return Value::floating(rounded / scale);
}

Value filesizeformat(const Value& v, const CallArguments& a, int line) {
  const Value as_float = float_filter(v, {}, line);
  if (!v.is_number() && !v.is_string())
    fail(line, "filesizeformat needs a number, got " + python_type_name(v));
  const double bytes = as_float.as_double();
  const bool binary = argument_or(a, 0, "binary", Value::boolean(false)).truthy();
  const double base = binary ? 1024.0 : 1000.0;
  static const char* const decimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const binary_prefixes[] = {"KiB", "MiB", "GiB", "TiB",
                                                "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1.0) return Value::string("1 Byte");
  if (bytes < base) return Value::string(std::to_string(static_cast<long long>(bytes)) + " Bytes");
  double unit = base;
  std::size_t index = 0;
  for (; index < 8; ++index) {
    unit = std::pow(base, static_cast<double>(index + 2));
    if (bytes < unit) break;
  }
  index = std::min<std::size_t>(index, 7);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.1f %s", base * bytes / unit,
                binary ? binary_prefixes[index] : decimal[index]);
  return Value::string(buffer);
}

}  // namespace

void register_number_filters(FilterTable& table) {
  table.add("abs", abs);
  table.add("int", int_filter);
  table.add("float", float_filter);
  table.add("round", round);
  table.add("filesizeformat", filesizeformat);
}

}  // namespace dyncp::data::jinja
