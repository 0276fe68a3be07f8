#include "data/jinja_value.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "data/utf8.hpp"

namespace dyncp::data::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [name, value] : entries) {
    if (name == key) return &value;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [name, existing] : entries) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value Value::undefined_named(std::string name) {
  Value value;
  value.text_ = std::move(name);
  return value;
}
Value Value::none() {
  Value value;
  value.kind_ = Kind::none;
  return value;
}
Value Value::boolean(bool flag) {
  Value value;
  value.kind_ = Kind::boolean;
  value.bool_ = flag;
  value.int_ = flag ? 1 : 0;
  return value;
}
Value Value::integer(std::int64_t number) {
  Value value;
  value.kind_ = Kind::integer;
  value.int_ = number;
  return value;
}
Value Value::big_integer(std::string decimal_text) {
  Value value;
  value.kind_ = Kind::big_integer;
  value.text_ = std::move(decimal_text);
  return value;
}
Value Value::floating(double number) {
  Value value;
  value.kind_ = Kind::floating;
  value.double_ = number;
  return value;
}
Value Value::string(std::string text) {
  Value value;
  value.kind_ = Kind::string;
  value.text_ = std::move(text);
  return value;
}
Value Value::markup(std::string text) {
  Value value = string(std::move(text));
  value.is_markup_ = true;
  return value;
}
Value Value::named_tuple(std::string type_name, std::vector<std::string> fields, ValueList items) {
  Value value = list(std::move(items), true);
  value.fields_ =
      std::make_shared<const TupleFields>(TupleFields{std::move(type_name), std::move(fields)});
  return value;
}
Value Value::list(ValueList items, bool is_tuple) {
  Value value;
  value.kind_ = Kind::list;
  value.is_tuple_ = is_tuple;
  value.list_ = std::make_shared<ValueList>(std::move(items));
  return value;
}
Value Value::dict(std::shared_ptr<Dict> dict) {
  Value value;
  value.kind_ = Kind::dict;
  value.dict_ = std::move(dict);
  return value;
}
Value Value::new_dict() {
  return dict(std::make_shared<Dict>());
}
Value Value::callable(Callable function, std::string name) {
  Value value;
  value.kind_ = Kind::callable;
  value.text_ = std::move(name);
  value.callable_ = std::make_shared<Callable>(std::move(function));
  return value;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::floating:
      return double_;
    case Kind::big_integer:
      return std::strtod(text_.c_str(), nullptr);
    default:
      return static_cast<double>(int_);
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return bool_;
    case Kind::integer:
      return int_ != 0;
    case Kind::big_integer:
      return true;  // only integers beyond 64 bits are stored this way
    case Kind::floating:
      return double_ != 0.0;
    case Kind::string:
      return !text_.empty();
    case Kind::list:
      return !list_->empty();
    case Kind::dict:
      return dict_->is_namespace || !dict_->entries.empty();
    case Kind::callable:
      return true;
  }
  return false;
}

std::optional<Value> CallArguments::get(std::size_t index, std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  if (index < positional.size()) return positional[index];
  return std::nullopt;
}

bool python_equal(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::big_integer || b.kind() == Kind::big_integer) {
      return a.kind() == b.kind() && a.text() == b.text();
    }
    if (a.kind() == Kind::floating || b.kind() == Kind::floating)
      return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return a.text() == b.text();
    case Kind::list: {
      if (a.items().size() != b.items().size()) return false;
      for (std::size_t i = 0; i < a.items().size(); ++i) {
        if (!python_equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Kind::dict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      if (a.dict_ptr()->is_namespace || b.dict_ptr()->is_namespace) return false;
      const auto& left = a.dict_ptr()->entries;
      if (left.size() != b.dict_ptr()->entries.size()) return false;
      for (const auto& [key, value] : left) {
        const Value* other = b.dict_ptr()->find(key);
        if (other == nullptr || !python_equal(value, *other)) return false;
      }
      return true;
    }
    case Kind::callable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for exponents in [-4, 16).
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  std::string sign;
  if (scientific.front() == '-') {
    sign = "-";
    scientific.erase(0, 1);
  }
  const std::size_t e = scientific.find('e');
  std::string digits = scientific.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(scientific.substr(e + 1));
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      const std::size_t integer_digits = static_cast<std::size_t>(exponent) + 1;
      if (digits.size() <= integer_digits) {
        out = digits + std::string(integer_digits - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
      }
    } else {
      out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exponent_text;
  }
  return sign + out;
}

namespace {

// Python's str.isprintable for one code point (repr escapes the others).
bool is_printable(char32_t code_point) {
  if (code_point == U' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(code_point))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string repr_string(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  std::size_t offset = 0;
  while (offset < text.size()) {
    const std::size_t start = offset;
    const char32_t code_point = next_code_point(text, offset);
    if (code_point == static_cast<char32_t>(quote) || code_point == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(code_point));
    } else if (code_point == U'\n') {
      out += "\\n";
    } else if (code_point == U'\r') {
      out += "\\r";
    } else if (code_point == U'\t') {
      out += "\\t";
    } else if (!is_printable(code_point)) {
      char escaped[16];
      if (code_point < 0x100) {
        std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned>(code_point));
      } else if (code_point < 0x10000) {
        std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(code_point));
      } else {
        std::snprintf(escaped, sizeof(escaped), "\\U%08x", static_cast<unsigned>(code_point));
      }
      out += escaped;
    } else {
      out.append(text, start, offset - start);
    }
  }
  out.push_back(quote);
  return out;
}

void append_json_string(std::string& out, const std::string& text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out.push_back(c);  // ensure_ascii=False: everything else stays as UTF-8
        }
    }
  }
  out.push_back('"');
}

void append_json(std::string& out, const Value& value, const JsonDumpOptions& options, int depth) {
  using Kind = Value::Kind;
  const auto newline = [&](int level) {
    if (!options.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *options.indent;
  };
  const std::string& item_separator = options.item_separator;
  switch (value.kind()) {
    case Kind::none:
      out += "null";
      return;
    case Kind::boolean:
      out += value.as_bool() ? "true" : "false";
      return;
    case Kind::integer:
      out += std::to_string(value.as_int());
      return;
    case Kind::big_integer:
      out += value.text();
      return;
    case Kind::floating: {
      const double number = value.as_double();
      if (std::isnan(number)) {
        out += "NaN";
      } else if (std::isinf(number)) {
        out += number > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(number);
      }
      return;
    }
    case Kind::string:
      append_json_string(out, value.text());
      return;
    case Kind::list: {
      if (value.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (std::size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json(out, value.items()[i], options, depth + 1);
      }
      newline(depth);
      out.push_back(']');
      return;
    }
    case Kind::dict: {
      if (value.dict_ptr()->is_namespace)
        throw std::invalid_argument("Object of type Namespace is not JSON serializable");
      auto entries = value.dict_ptr()->entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      }
      out.push_back('{');
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json_string(out, entries[i].first);
        out += options.key_separator;
        append_json(out, entries[i].second, options, depth + 1);
      }
      newline(depth);
      out.push_back('}');
      return;
    }
    case Kind::undefined:
      throw std::invalid_argument("Object of type Undefined is not JSON serializable");
    case Kind::callable:
      throw std::invalid_argument("Object of type function is not JSON serializable");
  }
}

// Builds values from nlohmann's SAX events, which carry each number's source text, so
// integers of any size and float spellings come out as Python's json.loads reads them.
class ValueBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  Value result;

  bool null() override { return add(Value::none()); }
  bool boolean(bool value) override { return add(Value::boolean(value)); }
  bool number_integer(number_integer_t value) override {
    return add(Value::integer(static_cast<std::int64_t>(value)));
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (value <= static_cast<number_unsigned_t>(INT64_MAX))
      return add(Value::integer(static_cast<std::int64_t>(value)));
    return add(Value::big_integer(std::to_string(value)));
  }
  bool number_float(number_float_t value, const string_t& text) override {
    // nlohmann reports integers that overflow 64 bits as floats; Python keeps them exact.
    if (text.find_first_of(".eE") == std::string::npos) return add(Value::big_integer(text));
    return add(Value::floating(value));
  }
  bool string(string_t& value) override { return add(Value::string(value)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override {
    Value dict = Value::new_dict();
    add(dict);
    stack_.push_back(dict);
    return true;
  }
  bool key(string_t& value) override {
    key_ = value;
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    Value list = Value::list({});
    add(list);
    stack_.push_back(list);
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    throw std::invalid_argument(error.what());
  }

 private:
  bool add(Value value) {
    if (stack_.empty()) {
      result = std::move(value);
    } else if (stack_.back().is_dict()) {
      stack_.back().dict_ptr()->set(key_, std::move(value));
    } else {
      stack_.back().list_ptr()->push_back(std::move(value));
    }
    return true;
  }
  std::vector<Value> stack_;
  std::string key_;
};

}  // namespace

std::string python_type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::none:
      return "NoneType";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
    case Value::Kind::big_integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return "str";
    case Value::Kind::list:
      return value.is_tuple() ? "tuple" : "list";
    case Value::Kind::dict:
      return value.dict_ptr()->is_namespace ? "Namespace" : "dict";
    case Value::Kind::callable:
      return "function";
  }
  return "object";
}

std::string python_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::string:
      return value.is_markup() ? "Markup(" + repr_string(value.text()) + ")"
                               : repr_string(value.text());
    case Value::Kind::undefined:
      return "Undefined";
    default:
      return python_str(value);
  }
}

std::string python_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(value.as_int());
    case Value::Kind::big_integer:
    case Value::Kind::string:
      return value.text();
    case Value::Kind::floating:
      return python_float_repr(value.as_double());
    case Value::Kind::list: {
      std::string out = value.is_tuple() ? "(" : "[";
      for (std::size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += ", ";
        out += python_repr(value.items()[i]);
      }
      if (value.is_tuple() && value.items().size() == 1) out += ",";
      out += value.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::dict: {
      if (value.dict_ptr()->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.dict_ptr()->entries) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(key) + ": " + python_repr(item);
      }
      return out + "}";
    }
    case Value::Kind::callable:
      return "<function " + value.text() + ">";
  }
  return "";
}

std::string python_json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  append_json(out, value, options, 0);
  return out;
}

Value parse_json_value(std::string_view json_text) {
  ValueBuilder builder;
  if (!nlohmann::json::sax_parse(json_text, &builder)) {
    throw std::invalid_argument("invalid JSON");
  }
  return builder.result;
}

}  // namespace dyncp::data::jinja
