#include "data/jinja_builtins.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>

#include "data/utf8.hpp"

namespace dyncp::data::jinja {

namespace {

using Filter = std::function<Value(const Value&, const CallArguments&, int)>;
using Test = std::function<bool(const Value&, const CallArguments&, int)>;

[[noreturn]] void fail(int line, const std::string& message) {
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

std::string map_case(const std::string& text, bool upper) {
  std::string out;
  std::size_t offset = 0;
  while (offset < text.size()) {
    const auto c = static_cast<utf8proc_int32_t>(next_code_point(text, offset));
    append_utf8(out, static_cast<char32_t>(upper ? utf8proc_toupper(c) : utf8proc_tolower(c)));
  }
  return out;
}

bool is_letter(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
}

std::string title_case(const std::string& text) {
  std::string out;
  bool previous_cased = false;
  std::size_t offset = 0;
  while (offset < text.size()) {
    const auto c = static_cast<utf8proc_int32_t>(next_code_point(text, offset));
    const bool letter = is_letter(static_cast<char32_t>(c));
    append_utf8(out,
                static_cast<char32_t>(
                    letter ? (previous_cased ? utf8proc_tolower(c) : utf8proc_toupper(c)) : c));
    previous_cased = letter;
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
    current = numeric ? get_item(current, Value::integer(std::stoll(part)), line)
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

Value select_items(const Value& input, const CallArguments& arguments, bool by_attribute, bool keep,
                   int line) {
  ValueList selected;
  std::string attribute;
  std::size_t used = 0;
  if (by_attribute) {
    if (arguments.positional.empty()) fail(line, "selectattr/rejectattr need an attribute name");
    attribute = require_string(arguments.positional[0], "selectattr()", line);
    used = 1;
  }
  std::optional<std::string> test_name;
  if (arguments.positional.size() > used) {
    test_name = require_string(arguments.positional[used], "select()", line);
    ++used;
  }
  const CallArguments test_arguments = shifted(arguments, used);
  for (const Value& item : iterate(input, line)) {
    const Value subject = by_attribute ? attribute_path(item, attribute, line) : item;
    const bool passed =
        test_name ? apply_test(*test_name, subject, test_arguments, line) : subject.truthy();
    if (passed == keep) selected.push_back(item);
  }
  return Value::list(std::move(selected));
}

Value join_filter(const Value& input, const CallArguments& arguments, int line) {
  const std::optional<Value> separator = arguments.get(0, "d");
  const std::optional<Value> attribute = arguments.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input, line)) {
    if (!first && separator) out += python_str(*separator);
    first = false;
    out += python_str(attribute ? attribute_path(item, python_str(*attribute), line) : item);
  }
  return Value::string(std::move(out));
}

Value tojson_filter(const Value& input, const CallArguments& arguments, int line) {
  JsonDumpOptions options;
  const std::optional<Value> ensure_ascii = arguments.get(0, "ensure_ascii");
  if (ensure_ascii && ensure_ascii->truthy())
    fail(line, "tojson(ensure_ascii=True) is not supported");
  const std::optional<Value> indent = arguments.get(1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->text();
    } else {
      options.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(
                                       0, require_int(*indent, "tojson(indent)", line))),
                                   ' ');
    }
    options.item_separator = ",";  // json.dumps' default separators once indent is set
  }
  const std::optional<Value> separators = arguments.get(2, "separators");
  if (separators && !separators->is_none()) {
    if (!separators->is_list() || separators->items().size() != 2)
      fail(line, "tojson(separators=...) needs a pair of strings");
    options.item_separator = require_string(separators->items()[0], "separators", line);
    options.key_separator = require_string(separators->items()[1], "separators", line);
  }
  const std::optional<Value> sort_keys = arguments.get(3, "sort_keys");
  options.sort_keys = sort_keys && sort_keys->truthy();
  try {
    return Value::string(python_json_dumps(input, options));
  } catch (const std::invalid_argument& error) {
    fail(line, error.what());
  }
}

Value int_filter(const Value& input, const CallArguments& arguments, int line) {
  const Value fallback = arguments.get(0, "default").value_or(Value::integer(0));
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
      try {
        std::size_t used = 0;
        const std::string text = strip(input.text(), std::nullopt, true, true, line);
        const long long parsed = std::stoll(text, &used, 10);
        if (used == text.size()) return Value::integer(parsed);
        const double as_float = std::stod(text, &used);
        if (used == text.size()) return Value::integer(static_cast<std::int64_t>(as_float));
      } catch (const std::exception&) {
      }
      return fallback;
    }
    default:
      return fallback;
  }
}

Value float_filter(const Value& input, const CallArguments& arguments, int line) {
  (void)line;
  const Value fallback = arguments.get(0, "default").value_or(Value::floating(0.0));
  if (input.is_number()) return Value::floating(input.as_double());
  if (input.is_string()) {
    try {
      std::size_t used = 0;
      const double parsed = std::stod(input.text(), &used);
      if (used == input.text().size()) return Value::floating(parsed);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value indent_filter(const Value& input, const CallArguments& arguments, int line) {
  const std::optional<Value> width = arguments.get(0, "width");
  std::string indentation = "    ";
  if (width) {
    indentation =
        width->is_string()
            ? width->text()
            : std::string(static_cast<std::size_t>(require_int(*width, "indent()", line)), ' ');
  }
  const bool first = arguments.get(1, "first").value_or(Value::boolean(false)).truthy();
  const bool blank = arguments.get(2, "blank").value_or(Value::boolean(false)).truthy();
  const std::string text = python_str(input);
  std::string out;
  std::size_t start = 0;
  bool first_line = true;
  while (true) {
    const std::size_t newline = text.find('\n', start);
    const std::string line_text =
        text.substr(start, newline == std::string::npos ? std::string::npos : newline - start);
    if ((!first_line || first) && (blank || !line_text.empty())) out += indentation;
    out += line_text;
    if (newline == std::string::npos) break;
    out += "\n";
    start = newline + 1;
    first_line = false;
  }
  return Value::string(std::move(out));
}

Value escape_html(const Value& input) {
  std::string out;
  for (const char c : python_str(input)) {
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
  return Value::string(std::move(out));
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> table = [] {
    std::map<std::string, Filter, std::less<>> f;
    f["tojson"] = tojson_filter;
    f["trim"] = [](const Value& v, const CallArguments& a, int line) {
      return Value::string(strip(python_str(v), a.get(0, "chars"), true, true, line));
    };
    f["length"] = [](const Value& v, const CallArguments&, int line) {
      return Value::integer(length_of(v, line));
    };
    f["count"] = f["length"];
    f["join"] = join_filter;
    f["default"] = [](const Value& v, const CallArguments& a, int) {
      const bool boolean = a.get(1, "boolean").value_or(Value::boolean(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy()))
        return a.get(0, "default_value").value_or(Value::string(""));
      return v;
    };
    f["d"] = f["default"];
    f["safe"] = [](const Value& v, const CallArguments&, int) {
      return v.is_string() ? v : Value::string(python_str(v));
    };
    f["string"] = [](const Value& v, const CallArguments&, int) {
      return Value::string(python_str(v));
    };
    f["list"] = [](const Value& v, const CallArguments&, int line) {
      return Value::list(iterate(v, line));
    };
    f["first"] = [](const Value& v, const CallArguments&, int line) {
      const ValueList items = iterate(v, line);
      return items.empty() ? Value::undefined_named("first item") : items.front();
    };
    f["last"] = [](const Value& v, const CallArguments&, int line) {
      const ValueList items = iterate(v, line);
      return items.empty() ? Value::undefined_named("last item") : items.back();
    };
    f["lower"] = [](const Value& v, const CallArguments&, int) {
      return Value::string(map_case(python_str(v), false));
    };
    f["upper"] = [](const Value& v, const CallArguments&, int) {
      return Value::string(map_case(python_str(v), true));
    };
    f["title"] = [](const Value& v, const CallArguments&, int) {
      return Value::string(title_case(python_str(v)));
    };
    f["capitalize"] = [](const Value& v, const CallArguments&, int) {
      const std::string text = map_case(python_str(v), false);
      std::size_t offset = 0;
      if (text.empty()) return Value::string("");
      const char32_t first = next_code_point(text, offset);
      std::string out;
      append_utf8(out,
                  static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(first))));
      return Value::string(out + text.substr(offset));
    };
    f["replace"] = [](const Value& v, const CallArguments& a, int line) {
      const std::optional<Value> old_text = a.get(0, "old");
      const std::optional<Value> new_text = a.get(1, "new");
      if (!old_text || !new_text) fail(line, "replace needs old and new");
      const std::optional<Value> count = a.get(2, "count");
      return Value::string(
          replace_all(python_str(v), python_str(*old_text), python_str(*new_text),
                      count && !count->is_none() ? require_int(*count, "replace()", line) : -1));
    };
    f["reverse"] = [](const Value& v, const CallArguments&, int line) {
      if (v.is_string()) {
        std::u32string code_points = decode(v.text());
        std::reverse(code_points.begin(), code_points.end());
        return Value::string(encode(code_points));
      }
      ValueList items = iterate(v, line);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    f["items"] = [](const Value& v, const CallArguments&, int line) {
      if (v.is_undefined()) return Value::list({});
      if (!v.is_dict() || v.dict_ptr()->is_namespace)
        fail(line, "Can only get item pairs from a mapping.");
      ValueList pairs;
      for (const auto& [key, item] : v.dict_ptr()->entries)
        pairs.push_back(Value::list({Value::string(key), item}, true));
      return Value::list(std::move(pairs));
    };
    f["selectattr"] = [](const Value& v, const CallArguments& a, int line) {
      return select_items(v, a, true, true, line);
    };
    f["rejectattr"] = [](const Value& v, const CallArguments& a, int line) {
      return select_items(v, a, true, false, line);
    };
    f["select"] = [](const Value& v, const CallArguments& a, int line) {
      return select_items(v, a, false, true, line);
    };
    f["reject"] = [](const Value& v, const CallArguments& a, int line) {
      return select_items(v, a, false, false, line);
    };
    f["map"] = [](const Value& v, const CallArguments& a, int line) {
      ValueList mapped;
      if (const std::optional<Value> attribute = a.get(99, "attribute")) {
        const std::optional<Value> fallback = a.get(99, "default");
        for (const Value& item : iterate(v, line)) {
          Value value = attribute_path(item, python_str(*attribute), line);
          mapped.push_back(value.is_undefined() && fallback ? *fallback : value);
        }
        return Value::list(std::move(mapped));
      }
      if (a.positional.empty()) fail(line, "map needs a filter name or attribute=");
      const std::string filter = require_string(a.positional[0], "map()", line);
      const CallArguments rest = shifted(a, 1);
      for (const Value& item : iterate(v, line))
        mapped.push_back(apply_filter(filter, item, rest, line));
      return Value::list(std::move(mapped));
    };
    f["unique"] = [](const Value& v, const CallArguments&, int line) {
      ValueList unique;
      for (const Value& item : iterate(v, line)) {
        bool seen = false;
        for (const Value& kept : unique) seen |= python_equal(kept, item);
        if (!seen) unique.push_back(item);
      }
      return Value::list(std::move(unique));
    };
    f["sort"] = [](const Value& v, const CallArguments& a, int line) {
      ValueList items = iterate(v, line);
      const bool reverse = a.get(0, "reverse").value_or(Value::boolean(false)).truthy();
      const std::optional<Value> attribute = a.get(2, "attribute");
      const auto key = [&](const Value& item) {
        Value k = attribute ? attribute_path(item, python_str(*attribute), line) : item;
        return k.is_string() ? Value::string(map_case(k.text(), false)) : k;  // case-insensitive
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? python_less(key(y), key(x), line) : python_less(key(x), key(y), line);
      });
      return Value::list(std::move(items));
    };
    f["min"] = [](const Value& v, const CallArguments&, int line) {
      const ValueList items = iterate(v, line);
      if (items.empty()) return Value::undefined_named("min of an empty sequence");
      return *std::min_element(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return python_less(x, y, line);
      });
    };
    f["max"] = [](const Value& v, const CallArguments&, int line) {
      const ValueList items = iterate(v, line);
      if (items.empty()) return Value::undefined_named("max of an empty sequence");
      return *std::max_element(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return python_less(x, y, line);
      });
    };
    f["sum"] = [](const Value& v, const CallArguments& a, int line) {
      const std::optional<Value> attribute = a.get(0, "attribute");
      bool as_float = false;
      std::int64_t integer = 0;
      double floating = 0.0;
      for (const Value& item : iterate(v, line)) {
        const Value x = attribute ? attribute_path(item, python_str(*attribute), line) : item;
        if (!x.is_number() || x.kind() == Value::Kind::big_integer)
          fail(line, "sum() needs numbers, got " + python_type_name(x));
        if (x.kind() == Value::Kind::floating) as_float = true;
        integer += x.as_int();
        floating += x.as_double();
      }
      return as_float ? Value::floating(floating) : Value::integer(integer);
    };
    f["abs"] = [](const Value& v, const CallArguments&, int line) {
      if (v.kind() == Value::Kind::floating) return Value::floating(std::fabs(v.as_double()));
      if (v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean)
        return Value::integer(std::llabs(v.as_int()));
      fail(line, "bad operand type for abs(): '" + python_type_name(v) + "'");
    };
    f["int"] = int_filter;
    f["float"] = float_filter;
    f["round"] = [](const Value& v, const CallArguments& a, int line) {
      const std::int64_t precision =
          require_int(a.get(0, "precision").value_or(Value::integer(0)), "round()", line);
      const std::string method = python_str(a.get(1, "method").value_or(Value::string("common")));
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      const double rounded = method == "ceil"    ? std::ceil(x)
                             : method == "floor" ? std::floor(x)
                                                 : std::nearbyint(x);
      return Value::floating(rounded / scale);
    };
    f["indent"] = indent_filter;
    f["escape"] = [](const Value& v, const CallArguments&, int) { return escape_html(v); };
    f["e"] = f["escape"];
    f["wordcount"] = [](const Value& v, const CallArguments&, int line) {
      return Value::integer(
          length_of(split(python_str(v), std::nullopt, std::nullopt, line), line));
    };
    return f;
  }();
  return table;
}

bool is_sequence(const Value& v) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.dict_ptr()->is_namespace);
}

const std::map<std::string, Test, std::less<>>& tests() {
  static const std::map<std::string, Test, std::less<>> table = [] {
    std::map<std::string, Test, std::less<>> t;
    const auto argument = [](const CallArguments& a, int line) {
      if (a.positional.empty()) fail(line, "this test needs an argument");
      return a.positional[0];
    };
    t["defined"] = [](const Value& v, const CallArguments&, int) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArguments&, int) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArguments&, int) { return v.is_none(); };
    t["string"] = [](const Value& v, const CallArguments&, int) { return v.is_string(); };
    t["number"] = [](const Value& v, const CallArguments&, int) { return v.is_number(); };
    t["integer"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::big_integer;
    };
    t["float"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::floating;
    };
    t["boolean"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::boolean;
    };
    t["true"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::boolean && v.as_bool();
    };
    t["false"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::boolean && !v.as_bool();
    };
    t["mapping"] = [](const Value& v, const CallArguments&, int) {
      return v.is_dict() && !v.dict_ptr()->is_namespace;
    };
    // Jinja's Undefined has __len__ and __getitem__, so it passes `sequence` and `iterable`.
    t["sequence"] = [](const Value& v, const CallArguments&, int) {
      return is_sequence(v) || v.is_undefined();
    };
    t["iterable"] = [](const Value& v, const CallArguments&, int) {
      return is_sequence(v) || v.is_undefined();
    };
    t["callable"] = [](const Value& v, const CallArguments&, int) {
      return v.kind() == Value::Kind::callable;
    };
    t["odd"] = [](const Value& v, const CallArguments&, int line) {
      return require_int(v, "odd", line) % 2 != 0;
    };
    t["even"] = [](const Value& v, const CallArguments&, int line) {
      return require_int(v, "even", line) % 2 == 0;
    };
    t["divisibleby"] = [argument](const Value& v, const CallArguments& a, int line) {
      const std::int64_t divisor = require_int(argument(a, line), "divisibleby", line);
      if (divisor == 0) fail(line, "integer division or modulo by zero");
      return require_int(v, "divisibleby", line) % divisor == 0;
    };
    t["eq"] = [argument](const Value& v, const CallArguments& a, int line) {
      return python_equal(v, argument(a, line));
    };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [argument](const Value& v, const CallArguments& a, int line) {
      return !python_equal(v, argument(a, line));
    };
    t["!="] = t["ne"];
    t["lt"] = [argument](const Value& v, const CallArguments& a, int line) {
      return python_less(v, argument(a, line), line);
    };
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["gt"] = [argument](const Value& v, const CallArguments& a, int line) {
      return python_less(argument(a, line), v, line);
    };
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t["le"] = [argument](const Value& v, const CallArguments& a, int line) {
      return !python_less(argument(a, line), v, line);
    };
    t["<="] = t["le"];
    t["ge"] = [argument](const Value& v, const CallArguments& a, int line) {
      return !python_less(v, argument(a, line), line);
    };
    t[">="] = t["ge"];
    t["sameas"] = [argument](const Value& v, const CallArguments& a, int line) {
      const Value other = argument(a, line);
      if (v.kind() != other.kind()) return false;
      if (v.is_dict()) return v.dict_ptr() == other.dict_ptr();
      if (v.is_list()) return v.list_ptr() == other.list_ptr();
      return python_equal(v, other);
    };
    t["in"] = [argument](const Value& v, const CallArguments& a, int line) {
      const Value container = argument(a, line);
      for (const Value& item : iterate(container, line)) {
        if (container.is_string() ? item.text() == python_str(v) : python_equal(item, v))
          return true;
      }
      return container.is_string() && v.is_string() &&
             container.text().find(v.text()) != std::string::npos;
    };
    t["lower"] = [](const Value& v, const CallArguments&, int) {
      return v.is_string() && map_case(v.text(), false) == v.text();
    };
    t["upper"] = [](const Value& v, const CallArguments&, int) {
      return v.is_string() && map_case(v.text(), true) == v.text();
    };
    return t;
  }();
  return table;
}

Value method(std::function<Value(const CallArguments&)> body, std::string name) {
  return Value::callable(
      [body = std::move(body)](CallArguments& arguments) { return body(arguments); },
      std::move(name));
}

Value string_method(const Value& self, const std::string& name, int line) {
  const std::string text = self.text();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    return method(
        [=](const CallArguments& a) {
          return Value::string(strip(text, a.get(0, "chars"), left, right, line));
        },
        name);
  }
  if (name == "split") {
    return method(
        [=](const CallArguments& a) {
          return split(text, a.get(0, "sep"), a.get(1, "maxsplit"), line);
        },
        name);
  }
  if (name == "rsplit") {
    return method(
        [=](const CallArguments& a) {
          const std::optional<Value> max_split = a.get(1, "maxsplit");
          if (max_split && require_int(*max_split, "rsplit()", line) >= 0)
            fail(line, "rsplit() with maxsplit is not supported");
          return split(text, a.get(0, "sep"), std::nullopt, line);
        },
        name);
  }
  if (name == "splitlines") {
    return method(
        [=](const CallArguments& a) {
          const bool keep = a.get(0, "keepends").value_or(Value::boolean(false)).truthy();
          ValueList lines;
          std::size_t start = 0;
          for (std::size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '\n' || text[i] == '\r') {
              std::size_t end = i;
              if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
              lines.push_back(Value::string(text.substr(start, (keep ? i + 1 : end) - start)));
              start = i + 1;
            }
          }
          if (start < text.size()) lines.push_back(Value::string(text.substr(start)));
          return Value::list(std::move(lines));
        },
        name);
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return method(
        [=](const CallArguments& a) {
          if (a.positional.empty()) fail(line, name + "() needs an argument");
          if (a.positional.size() > 1) fail(line, name + "() with start/end is not supported");
          return Value::boolean(starts_or_ends(text, a.positional[0], starts, line));
        },
        name);
  }
  if (name == "upper" || name == "lower") {
    const bool upper = name == "upper";
    return method([=](const CallArguments&) { return Value::string(map_case(text, upper)); }, name);
  }
  if (name == "title") {
    return method([=](const CallArguments&) { return Value::string(title_case(text)); }, name);
  }
  if (name == "capitalize") {
    return method(
        [=](const CallArguments& a) {
          return apply_filter("capitalize", Value::string(text), a, line);
        },
        name);
  }
  if (name == "replace") {
    return method(
        [=](const CallArguments& a) {
          if (a.positional.size() < 2) fail(line, "replace() needs old and new");
          const std::int64_t count =
              a.positional.size() > 2 ? require_int(a.positional[2], "replace()", line) : -1;
          return Value::string(replace_all(text, require_string(a.positional[0], "replace()", line),
                                           require_string(a.positional[1], "replace()", line),
                                           count));
        },
        name);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method(
        [=](const CallArguments& a) {
          if (a.positional.size() != 1) fail(line, name + "() needs one argument");
          const std::string& needle = require_string(a.positional[0], "find()", line);
          if (name == "count") {
            if (needle.empty()) return Value::integer(length_of(Value::string(text), line) + 1);
            std::int64_t count = 0;
            for (std::size_t at = text.find(needle); at != std::string::npos;
                 at = text.find(needle, at + needle.size()))
              ++count;
            return Value::integer(count);
          }
          const std::size_t at = name[0] == 'r' ? text.rfind(needle) : text.find(needle);
          if (at == std::string::npos) {
            if (name == "index" || name == "rindex") fail(line, "substring not found");
            return Value::integer(-1);
          }
          return Value::integer(static_cast<std::int64_t>(decode(text.substr(0, at)).size()));
        },
        name);
  }
  if (name == "join") {
    return method(
        [=](const CallArguments& a) {
          if (a.positional.size() != 1) fail(line, "join() needs one argument");
          std::string out;
          bool first = true;
          for (const Value& item : iterate(a.positional[0], line)) {
            if (!first) out += text;
            first = false;
            out += require_string(item, "str.join()", line);
          }
          return Value::string(std::move(out));
        },
        name);
  }
  const auto predicate = [&](std::function<bool(char32_t)> test) {
    return method(
        [=](const CallArguments&) {
          const std::u32string code_points = decode(text);
          return Value::boolean(!code_points.empty() &&
                                std::all_of(code_points.begin(), code_points.end(), test));
        },
        name);
  };
  if (name == "isspace") return predicate(is_python_space);
  if (name == "isdigit") {
    return predicate([](char32_t c) {
      return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
    });
  }
  if (name == "isalpha") return predicate(is_letter);
  if (name == "isalnum") {
    return predicate([](char32_t c) {
      return is_letter(c) ||
             utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
    });
  }
  return Value::undefined_named("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, int line) {
  const std::shared_ptr<Dict> dict = self.dict_ptr();
  if (name == "items") {
    return method(
        [=](const CallArguments& a) { return apply_filter("items", Value::dict(dict), a, line); },
        name);
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return method(
        [=](const CallArguments&) {
          ValueList out;
          for (const auto& [key, value] : dict->entries)
            out.push_back(keys ? Value::string(key) : value);
          return Value::list(std::move(out));
        },
        name);
  }
  if (name == "get") {
    return method(
        [=](const CallArguments& a) {
          if (a.positional.empty()) fail(line, "get() needs a key");
          const Value* found =
              a.positional[0].is_string() ? dict->find(a.positional[0].text()) : nullptr;
          if (found != nullptr) return *found;
          return a.positional.size() > 1 ? a.positional[1] : Value::none();
        },
        name);
  }
  static const char* const refused[] = {"pop", "popitem", "update", "setdefault", "clear"};
  for (const char* blocked : refused) {
    if (name == blocked) {
      return method(
          [=](const CallArguments&) -> Value {
            fail(line, "dict." + name + "() modifies a dict, which transformers' sandbox refuses");
          },
          name);
    }
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name, int line) {
  const std::shared_ptr<ValueList> items = self.list_ptr();
  if (name == "index" || name == "count") {
    return method(
        [=](const CallArguments& a) {
          if (a.positional.size() != 1) fail(line, name + "() needs one argument");
          std::int64_t count = 0;
          for (std::size_t i = 0; i < items->size(); ++i) {
            if (python_equal((*items)[i], a.positional[0])) {
              if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
              ++count;
            }
          }
          if (name == "index") fail(line, "value is not in list");
          return Value::integer(count);
        },
        name);
  }
  static const char* const refused[] = {"append", "extend", "insert",  "pop",
                                        "remove", "sort",   "reverse", "clear"};
  for (const char* blocked : refused) {
    if (name == blocked) {
      return method(
          [=](const CallArguments&) -> Value {
            fail(line, "list." + name + "() modifies a list, which transformers' sandbox refuses");
          },
          name);
    }
  }
  return Value::undefined_named("'list object' has no attribute '" + name + "'");
}

std::int64_t normalize_index(std::int64_t index, std::int64_t size) {
  return index < 0 ? index + size : index;
}

}  // namespace

void throw_undefined(const Value& value, int line) {
  const std::string& name = value.text();
  if (name.empty()) fail(line, "a value is undefined");
  if (name.front() == '\'') fail(line, name);  // already a full message
  fail(line, "'" + name + "' is undefined");
}

bool is_known_filter(std::string_view name) {
  return filters().contains(name);
}
bool is_known_test(std::string_view name) {
  return tests().contains(name);
}

Value apply_filter(const std::string& name, const Value& input, const CallArguments& arguments,
                   int line) {
  const auto found = filters().find(name);
  if (found == filters().end()) fail(line, "no filter named '" + name + "'");
  // Filters other than these read their input, and Jinja's Undefined refuses to be read.
  static const char* const accept_undefined[] = {
      "default", "d",       "length", "count",  "list",   "items",      "string",
      "trim",    "join",    "lower",  "upper",  "safe",   "first",      "last",
      "escape",  "e",       "map",    "select", "reject", "selectattr", "rejectattr",
      "unique",  "reverse", "sort",   "indent", "title",  "capitalize", "wordcount"};
  if (input.is_undefined() &&
      std::none_of(std::begin(accept_undefined), std::end(accept_undefined),
                   [&](const char* allowed) { return name == allowed; }) &&
      name != "tojson") {
    throw_undefined(input, line);
  }
  return found->second(input, arguments, line);
}

bool apply_test(const std::string& name, const Value& input, const CallArguments& arguments,
                int line) {
  const auto found = tests().find(name);
  if (found == tests().end()) fail(line, "no test named '" + name + "'");
  return found->second(input, arguments, line);
}

Value get_attribute(const Value& object, const std::string& name, int line) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      throw_undefined(object, line);
    case Value::Kind::dict: {
      if (object.dict_ptr()->is_namespace) {
        const Value* found = object.dict_ptr()->find(name);
        return found ? *found
                     : Value::undefined_named("'Namespace' has no attribute '" + name + "'");
      }
      Value method_value = dict_method(object, name, line);
      if (!method_value.is_undefined()) return method_value;
      const Value* found = object.dict_ptr()->find(name);
      return found ? *found
                   : Value::undefined_named("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::string:
      return string_method(object, name, line);
    case Value::Kind::list:
      return list_method(object, name, line);
    default:
      return Value::undefined_named("'" + python_type_name(object) + " object' has no attribute '" +
                                    name + "'");
  }
}

Value get_item(const Value& object, const Value& key, int line) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      throw_undefined(object, line);
    case Value::Kind::dict: {
      if (key.is_string()) {
        if (const Value* found = object.dict_ptr()->find(key.text()); found != nullptr)
          return *found;
        return get_attribute(object, key.text(), line);
      }
      return Value::undefined_named("'dict object' has no attribute " + python_repr(key));
    }
    case Value::Kind::list:
    case Value::Kind::string: {
      if (key.is_string()) return get_attribute(object, key.text(), line);
      if (key.kind() != Value::Kind::integer && key.kind() != Value::Kind::boolean)
        return Value::undefined_named(python_type_name(object) + " index " + python_repr(key));
      if (object.is_list()) {
        const std::int64_t size = static_cast<std::int64_t>(object.items().size());
        const std::int64_t index = normalize_index(key.as_int(), size);
        if (index < 0 || index >= size)
          return Value::undefined_named("'list object' has no element " +
                                        std::to_string(key.as_int()));
        return object.items()[static_cast<std::size_t>(index)];
      }
      const std::u32string code_points = decode(object.text());
      const std::int64_t size = static_cast<std::int64_t>(code_points.size());
      const std::int64_t index = normalize_index(key.as_int(), size);
      if (index < 0 || index >= size)
        return Value::undefined_named("'str object' has no element " +
                                      std::to_string(key.as_int()));
      return Value::string(
          encode(std::u32string_view(&code_points[static_cast<std::size_t>(index)], 1)));
    }
    default:
      return Value::undefined_named("'" + python_type_name(object) + " object' has no attribute " +
                                    python_repr(key));
  }
}

Value get_slice(const Value& object, const Value& start_value, const Value& stop_value,
                const Value& step_value, int line) {
  if (object.is_undefined()) throw_undefined(object, line);
  if (!object.is_list() && !object.is_string())
    fail(line, "'" + python_type_name(object) + "' object is not subscriptable");
  const std::u32string code_points = object.is_string() ? decode(object.text()) : std::u32string();
  const std::int64_t size = object.is_string() ? static_cast<std::int64_t>(code_points.size())
                                               : static_cast<std::int64_t>(object.items().size());
  const auto bound = [&](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return require_int(v, what, line);
  };
  const std::int64_t step = bound(step_value, "slice step").value_or(1);
  if (step == 0) fail(line, "slice step cannot be zero");
  // Python's slice.indices().
  const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v < 0 ? *v + size : *v;
    if (step > 0) return std::clamp<std::int64_t>(x, 0, size);
    return std::clamp<std::int64_t>(x, -1, size - 1);
  };
  const std::int64_t start = clamp(bound(start_value, "slice start"), step > 0 ? 0 : size - 1);
  const std::int64_t stop = clamp(bound(stop_value, "slice stop"), step > 0 ? size : -1);
  ValueList items;
  std::u32string text;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_string()) {
      text.push_back(code_points[static_cast<std::size_t>(i)]);
    } else {
      items.push_back(object.items()[static_cast<std::size_t>(i)]);
    }
  }
  if (object.is_string()) return Value::string(encode(text));
  return Value::list(std::move(items), object.is_tuple());
}

ValueList iterate(const Value& value, int line) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return value.items();
    case Value::Kind::dict: {
      if (value.dict_ptr()->is_namespace) fail(line, "'Namespace' object is not iterable");
      ValueList keys;
      for (const auto& entry : value.dict_ptr()->entries)
        keys.push_back(Value::string(entry.first));
      return keys;
    }
    case Value::Kind::string: {
      ValueList characters;
      if (is_ascii(value.text())) {
        for (const char c : value.text()) characters.push_back(Value::string(std::string(1, c)));
        return characters;
      }
      for (const char32_t c : decode(value.text()))
        characters.push_back(Value::string(encode(std::u32string_view(&c, 1))));
      return characters;
    }
    default:
      fail(line, "'" + python_type_name(value) + "' object is not iterable");
  }
}

std::int64_t length_of(const Value& value, int line) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return is_ascii(value.text()) ? static_cast<std::int64_t>(value.text().size())
                                    : static_cast<std::int64_t>(decode(value.text()).size());
    case Value::Kind::list:
      return static_cast<std::int64_t>(value.items().size());
    case Value::Kind::dict:
      if (!value.dict_ptr()->is_namespace)
        return static_cast<std::int64_t>(value.dict_ptr()->entries.size());
      [[fallthrough]];
    default:
      fail(line, "object of type '" + python_type_name(value) + "' has no len()");
  }
}

void add_globals(Dict& globals) {
  globals.set("range", Value::callable(
                           [](CallArguments& a) {
                             std::int64_t start = 0;
                             std::int64_t stop = 0;
                             std::int64_t step = 1;
                             const auto number = [](const Value& v) {
                               if (v.kind() != Value::Kind::integer)
                                 throw TemplateError(0, "range() needs integers");
                               return v.as_int();
                             };
                             if (a.positional.size() == 1) {
                               stop = number(a.positional[0]);
                             } else if (a.positional.size() == 2 || a.positional.size() == 3) {
                               start = number(a.positional[0]);
                               stop = number(a.positional[1]);
                               if (a.positional.size() == 3) step = number(a.positional[2]);
                             } else {
                               throw TemplateError(0, "range() takes 1 to 3 arguments");
                             }
                             if (step == 0) throw TemplateError(0, "range() step must not be zero");
                             ValueList items;
                             for (std::int64_t i = start; step > 0 ? i < stop : i > stop;
                                  i += step) {
                               if (items.size() >= 100000)
                                 throw TemplateError(0, "range() too big (sandbox limit 100000)");
                               items.push_back(Value::integer(i));
                             }
                             return Value::list(std::move(items));
                           },
                           "range"));
  const auto make_dict = [](CallArguments& a, bool as_namespace) {
    auto dict = std::make_shared<Dict>();
    dict->is_namespace = as_namespace;
    for (const Value& positional : a.positional) {
      if (!positional.is_dict())
        throw TemplateError(0, "namespace()/dict() take a dict or key=value");
      for (const auto& [key, value] : positional.dict_ptr()->entries) dict->set(key, value);
    }
    for (const auto& [key, value] : a.keyword) dict->set(key, value);
    return Value::dict(std::move(dict));
  };
  globals.set(
      "namespace",
      Value::callable([make_dict](CallArguments& a) { return make_dict(a, true); }, "namespace"));
  globals.set("dict", Value::callable([make_dict](CallArguments& a) { return make_dict(a, false); },
                                      "dict"));
  globals.set("raise_exception",
              Value::callable(
                  [](CallArguments& a) -> Value {
                    throw TemplateError(
                        0, a.positional.empty() ? std::string() : python_str(a.positional[0]),
                        true);
                  },
                  "raise_exception"));
  globals.set("strftime_now", Value::callable(
                                  [](CallArguments& a) {
                                    const std::string format = a.positional.empty()
                                                                   ? std::string()
                                                                   : python_str(a.positional[0]);
                                    const std::time_t now = std::time(nullptr);
                                    std::tm local{};
                                    localtime_r(&now, &local);
                                    char buffer[256];
                                    const std::size_t written = std::strftime(
                                        buffer, sizeof(buffer), format.c_str(), &local);
                                    return Value::string(std::string(buffer, written));
                                  },
                                  "strftime_now"));
}

}  // namespace dyncp::data::jinja
