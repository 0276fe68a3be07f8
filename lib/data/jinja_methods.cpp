// Methods of str, list and dict values (`text.strip()`, `d.items()`), as Python's. The ones
// that modify a list or dict are registered as refused: transformers' ImmutableSandboxedEnvironment
// refuses them.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

using Receiver = MethodTable::Receiver;

// ---- str

Value str_strip(const Value& self, const CallArguments& a, int line) {
  return Value::string(strip(self.text(), a.get(0, "chars"), true, true, line));
}
Value str_lstrip(const Value& self, const CallArguments& a, int line) {
  return Value::string(strip(self.text(), a.get(0, "chars"), true, false, line));
}
Value str_rstrip(const Value& self, const CallArguments& a, int line) {
  return Value::string(strip(self.text(), a.get(0, "chars"), false, true, line));
}
Value str_split(const Value& self, const CallArguments& a, int line) {
  return split(self.text(), a.get(0, "sep"), a.get(1, "maxsplit"), line);
}
Value str_rsplit(const Value& self, const CallArguments& a, int line) {
  const std::optional<Value> max_split = a.get(1, "maxsplit");
  if (max_split && require_int(*max_split, "rsplit()", line) >= 0)
    fail(line, "rsplit() with maxsplit is not supported");
  return split(self.text(), a.get(0, "sep"), std::nullopt, line);
}
Value str_splitlines(const Value& self, const CallArguments& a, int) {
  const std::string& text = self.text();
  const bool keep = argument_or(a, 0, "keepends", Value::boolean(false)).truthy();
  ValueList lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      const std::size_t end = i;
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      lines.push_back(Value::string(text.substr(start, (keep ? i + 1 : end) - start)));
      start = i + 1;
    }
  }
  if (start < text.size()) lines.push_back(Value::string(text.substr(start)));
  return Value::list(std::move(lines));
}
Value starts_or_ends_method(const Value& self, const CallArguments& a, bool starts, int line) {
  const char* name = starts ? "startswith" : "endswith";
  if (a.positional.empty()) fail(line, std::string(name) + "() needs an argument");
  if (a.positional.size() > 1) fail(line, std::string(name) + "() with start/end is not supported");
  return Value::boolean(starts_or_ends(self.text(), a.positional[0], starts, line));
}
Value str_startswith(const Value& self, const CallArguments& a, int line) {
  return starts_or_ends_method(self, a, true, line);
}
Value str_endswith(const Value& self, const CallArguments& a, int line) {
  return starts_or_ends_method(self, a, false, line);
}
Value str_upper(const Value& self, const CallArguments&, int) {
  return Value::string(map_case(self.text(), true));
}
Value str_lower(const Value& self, const CallArguments&, int) {
  return Value::string(map_case(self.text(), false));
}
Value str_title(const Value& self, const CallArguments&, int) {
  return Value::string(title_case(self.text()));
}
Value str_capitalize(const Value& self, const CallArguments&, int) {
  return Value::string(capitalize(self.text()));
}
Value str_replace(const Value& self, const CallArguments& a, int line) {
  if (a.positional.size() < 2) fail(line, "replace() needs old and new");
  const std::int64_t count =
      a.positional.size() > 2 ? require_int(a.positional[2], "replace()", line) : -1;
  return Value::string(replace_all(self.text(), require_string(a.positional[0], "replace()", line),
                                   require_string(a.positional[1], "replace()", line), count));
}
// find / rfind / index / rindex: the code-point position of the first (last) occurrence.
Value find_in(const Value& self, const CallArguments& a, bool from_right, bool raise, int line) {
  if (a.positional.size() != 1) fail(line, "find() needs one argument");
  const std::string& text = self.text();
  const std::string& needle = require_string(a.positional[0], "find()", line);
  const std::size_t at = from_right ? text.rfind(needle) : text.find(needle);
  if (at == std::string::npos) {
    if (raise) fail(line, "substring not found");
    return Value::integer(-1);
  }
  return Value::integer(code_point_count(std::string_view(text).substr(0, at)));
}
Value str_find(const Value& self, const CallArguments& a, int line) {
  return find_in(self, a, false, false, line);
}
Value str_rfind(const Value& self, const CallArguments& a, int line) {
  return find_in(self, a, true, false, line);
}
Value str_index(const Value& self, const CallArguments& a, int line) {
  return find_in(self, a, false, true, line);
}
Value str_rindex(const Value& self, const CallArguments& a, int line) {
  return find_in(self, a, true, true, line);
}
Value str_count(const Value& self, const CallArguments& a, int line) {
  if (a.positional.size() != 1) fail(line, "count() needs one argument");
  const std::string& text = self.text();
  const std::string& needle = require_string(a.positional[0], "find()", line);
  if (needle.empty()) return Value::integer(code_point_count(text) + 1);
  std::int64_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size()))
    ++count;
  return Value::integer(count);
}
Value str_join(const Value& self, const CallArguments& a, int line) {
  if (a.positional.size() != 1) fail(line, "join() needs one argument");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(a.positional[0], line)) {
    if (!first) out += self.text();
    first = false;
    out += require_string(item, "str.join()", line);
  }
  return Value::string(std::move(out));
}
template <bool (*Predicate)(char32_t)>
Value all_code_points(const Value& self, const CallArguments&, int) {
  const std::u32string code_points = decode(self.text());
  return Value::boolean(!code_points.empty() &&
                        std::all_of(code_points.begin(), code_points.end(), Predicate));
}
bool is_alnum(char32_t c) {
  return is_letter(c) || is_decimal_digit(c);
}

Value str_format(const Value& self, const CallArguments& a, int line) {
  std::string text = python_str_format(self.text(), a, self.is_markup(), line);
  return self.is_markup() ? Value::markup(std::move(text)) : Value::string(std::move(text));
}
Value str_format_map(const Value& self, const CallArguments& a, int line) {
  if (a.positional.size() != 1 || !a.positional[0].is_dict())
    fail(line, "format_map() takes one mapping");
  CallArguments keywords;
  for (const auto& entry : a.positional[0].dict_ptr()->entries) keywords.keyword.push_back(entry);
  return str_format(self, keywords, line);
}
// ljust / rjust / center's cousins: pad to `width` code points with one fill character.
Value justify(const Value& self, const CallArguments& a, bool left, int line) {
  const std::int64_t width =
      require_int(argument_or(a, 0, "width", Value::integer(0)), "ljust()", line);
  const std::string fill = python_str(argument_or(a, 1, "fillchar", Value::string(" ")));
  if (code_point_count(fill) != 1)
    fail(line, "The fill character must be exactly one character long");
  const std::int64_t missing = width - code_point_count(self.text());
  std::string padding;
  for (std::int64_t i = 0; i < missing; ++i) padding += fill;
  return Value::string(left ? self.text() + padding : padding + self.text());
}
Value str_ljust(const Value& self, const CallArguments& a, int line) {
  return justify(self, a, true, line);
}
Value str_rjust(const Value& self, const CallArguments& a, int line) {
  return justify(self, a, false, line);
}
Value str_zfill(const Value& self, const CallArguments& a, int line) {
  const std::int64_t width =
      require_int(argument_or(a, 0, "width", Value::integer(0)), "zfill()", line);
  std::string text = self.text();
  const std::int64_t missing = width - code_point_count(text);
  if (missing <= 0) return Value::string(text);
  const std::size_t at = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  text.insert(at, std::string(static_cast<std::size_t>(missing), '0'));
  return Value::string(std::move(text));
}
Value partition(const Value& self, const CallArguments& a, bool from_right, int line) {
  if (a.positional.size() != 1) fail(line, "partition() takes one separator");
  const std::string& separator = require_string(a.positional[0], "partition()", line);
  if (separator.empty()) fail(line, "empty separator");
  const std::string& text = self.text();
  const std::size_t at = from_right ? text.rfind(separator) : text.find(separator);
  if (at == std::string::npos) {
    return from_right
               ? Value::list({Value::string(""), Value::string(""), Value::string(text)}, true)
               : Value::list({Value::string(text), Value::string(""), Value::string("")}, true);
  }
  return Value::list({Value::string(text.substr(0, at)), Value::string(separator),
                      Value::string(text.substr(at + separator.size()))},
                     true);
}
Value str_partition(const Value& self, const CallArguments& a, int line) {
  return partition(self, a, false, line);
}
Value str_rpartition(const Value& self, const CallArguments& a, int line) {
  return partition(self, a, true, line);
}
Value str_swapcase(const Value& self, const CallArguments&, int) {
  std::string out;
  for (const char32_t c : decode(self.text())) {
    const std::string one = encode(std::u32string(1, c));
    const std::string upper = map_case(one, true);
    out += upper != one ? upper : map_case(one, false);
  }
  return Value::string(std::move(out));
}
Value affix_removed(const Value& self, const CallArguments& a, bool prefix, int line) {
  if (a.positional.size() != 1) fail(line, "removeprefix() / removesuffix() take one string");
  const std::string& affix = require_string(a.positional[0], "removeprefix()", line);
  const std::string& text = self.text();
  if (prefix && text.starts_with(affix)) return Value::string(text.substr(affix.size()));
  if (!prefix && text.ends_with(affix))
    return Value::string(text.substr(0, text.size() - affix.size()));
  return Value::string(text);
}
Value str_removeprefix(const Value& self, const CallArguments& a, int line) {
  return affix_removed(self, a, true, line);
}
Value str_removesuffix(const Value& self, const CallArguments& a, int line) {
  return affix_removed(self, a, false, line);
}
// isupper / islower: some cased character, and none of the other case.
Value cased(const Value& self, bool upper) {
  bool any = false;
  for (const char32_t c : decode(self.text())) {
    const std::string one = encode(std::u32string(1, c));
    const bool is_upper = map_case(one, false) != one;
    const bool is_lower = map_case(one, true) != one;
    if (upper ? is_lower : is_upper) return Value::boolean(false);
    any = any || (upper ? is_upper : is_lower);
  }
  return Value::boolean(any);
}
Value str_isupper(const Value& self, const CallArguments&, int) {
  return cased(self, true);
}
Value str_islower(const Value& self, const CallArguments&, int) {
  return cased(self, false);
}

Value str_center(const Value& self, const CallArguments& a, int line) {
  const std::int64_t width =
      require_int(argument_or(a, 0, "width", Value::integer(0)), "center()", line);
  const std::string fill = python_str(argument_or(a, 1, "fillchar", Value::string(" ")));
  if (code_point_count(fill) != 1)
    fail(line, "The fill character must be exactly one character long");
  const std::int64_t margin = width - code_point_count(self.text());
  if (margin <= 0) return Value::string(self.text());
  // CPython's str.center: the odd space goes left when the width is odd.
  const std::int64_t left = margin / 2 + (margin & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += self.text();
  for (std::int64_t i = left; i < margin; ++i) out += fill;
  return Value::string(std::move(out));
}
Value str_expandtabs(const Value& self, const CallArguments& a, int line) {
  const std::int64_t size =
      require_int(argument_or(a, 0, "tabsize", Value::integer(8)), "expandtabs()", line);
  std::string out;
  std::int64_t column = 0;
  for (const char32_t c : decode(self.text())) {
    if (c == '\t') {
      const std::int64_t spaces = size > 0 ? size - column % size : 0;
      out += std::string(static_cast<std::size_t>(spaces), ' ');
      column += spaces;
    } else {
      out += encode(std::u32string(1, c));
      column = c == '\n' || c == '\r' ? 0 : column + 1;
    }
  }
  return Value::string(std::move(out));
}
// Unicode full case folding (utf8proc), as str.casefold: "ß" folds to "ss".
Value str_casefold(const Value& self, const CallArguments&, int line) {
  utf8proc_uint8_t* folded = nullptr;
  const utf8proc_ssize_t size =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(self.text().data()),
                   static_cast<utf8proc_ssize_t>(self.text().size()), &folded, UTF8PROC_CASEFOLD);
  if (size < 0) fail(line, "casefold(): " + std::string(utf8proc_errmsg(size)));
  std::string out(reinterpret_cast<const char*>(folded), static_cast<std::size_t>(size));
  std::free(folded);
  return Value::string(std::move(out));
}

bool is_ascii_code_point(char32_t c) {
  return c < 0x80;
}
Value str_isascii(const Value& self, const CallArguments&, int) {
  const std::u32string code_points = decode(self.text());
  return Value::boolean(std::all_of(code_points.begin(), code_points.end(), is_ascii_code_point));
}
bool is_numeric_code_point(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}
// str.istitle: cased characters only upper after uncased ones and lower after cased ones.
Value str_istitle(const Value& self, const CallArguments&, int) {
  bool cased_seen = false;
  bool previous_cased = false;
  for (const char32_t c : decode(self.text())) {
    const std::string one = encode(std::u32string(1, c));
    const bool upper = map_case(one, false) != one;
    const bool lower = map_case(one, true) != one;
    if (upper) {
      if (previous_cased) return Value::boolean(false);
      previous_cased = cased_seen = true;
    } else if (lower) {
      if (!previous_cased) return Value::boolean(false);
      previous_cased = cased_seen = true;
    } else {
      previous_cased = false;
    }
  }
  return Value::boolean(cased_seen);
}

// ---- dict

Value dict_items(const Value& self, const CallArguments& a, int line) {
  return apply_filter("items", self, a, line);
}
Value dict_keys(const Value& self, const CallArguments&, int) {
  ValueList out;
  for (const auto& entry : self.dict_ptr()->entries) out.push_back(Value::string(entry.first));
  return Value::list(std::move(out));
}
Value dict_values(const Value& self, const CallArguments&, int) {
  ValueList out;
  for (const auto& entry : self.dict_ptr()->entries) out.push_back(entry.second);
  return Value::list(std::move(out));
}
Value dict_get(const Value& self, const CallArguments& a, int line) {
  if (a.positional.empty()) fail(line, "get() needs a key");
  const Value* found =
      a.positional[0].is_string() ? self.dict_ptr()->find(a.positional[0].text()) : nullptr;
  if (found != nullptr) return *found;
  return a.positional.size() > 1 ? a.positional[1] : Value::none();
}

Value dict_copy(const Value& self, const CallArguments&, int) {
  auto copy = std::make_shared<Dict>();
  copy->entries = self.dict_ptr()->entries;
  return Value::dict(std::move(copy));
}

// ---- list

Value list_copy(const Value& self, const CallArguments&, int) {
  return Value::list(self.items(), self.is_tuple());
}

Value list_index_or_count(const Value& self, const CallArguments& a, bool index, int line) {
  if (a.positional.size() != 1)
    fail(line, std::string(index ? "index" : "count") + "() needs one argument");
  std::int64_t count = 0;
  const ValueList& items = self.items();
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (python_equal(items[i], a.positional[0])) {
      if (index) return Value::integer(static_cast<std::int64_t>(i));
      ++count;
    }
  }
  if (index) fail(line, "value is not in list");
  return Value::integer(count);
}
Value list_index(const Value& self, const CallArguments& a, int line) {
  return list_index_or_count(self, a, true, line);
}
Value list_count(const Value& self, const CallArguments& a, int line) {
  return list_index_or_count(self, a, false, line);
}

const MethodTable& methods() {
  static const MethodTable table = [] {
    MethodTable t;
    t.add(Receiver::string, "strip", str_strip);
    t.add(Receiver::string, "lstrip", str_lstrip);
    t.add(Receiver::string, "rstrip", str_rstrip);
    t.add(Receiver::string, "split", str_split);
    t.add(Receiver::string, "rsplit", str_rsplit);
    t.add(Receiver::string, "splitlines", str_splitlines);
    t.add(Receiver::string, "startswith", str_startswith);
    t.add(Receiver::string, "endswith", str_endswith);
    t.add(Receiver::string, "upper", str_upper);
    t.add(Receiver::string, "lower", str_lower);
    t.add(Receiver::string, "title", str_title);
    t.add(Receiver::string, "capitalize", str_capitalize);
    t.add(Receiver::string, "replace", str_replace);
    t.add(Receiver::string, "find", str_find);
    t.add(Receiver::string, "rfind", str_rfind);
    t.add(Receiver::string, "index", str_index);
    t.add(Receiver::string, "rindex", str_rindex);
    t.add(Receiver::string, "count", str_count);
    t.add(Receiver::string, "join", str_join);
    t.add(Receiver::string, "isspace", all_code_points<is_python_space>);
    t.add(Receiver::string, "isdigit", all_code_points<is_decimal_digit>);
    t.add(Receiver::string, "isalpha", all_code_points<is_letter>);
    t.add(Receiver::string, "isalnum", all_code_points<is_alnum>);
    t.add(Receiver::string, "isdecimal", all_code_points<is_decimal_digit>);
    t.add(Receiver::string, "isupper", str_isupper);
    t.add(Receiver::string, "islower", str_islower);
    t.add(Receiver::string, "format", str_format);
    t.add(Receiver::string, "format_map", str_format_map);
    t.add(Receiver::string, "ljust", str_ljust);
    t.add(Receiver::string, "rjust", str_rjust);
    t.add(Receiver::string, "zfill", str_zfill);
    t.add(Receiver::string, "partition", str_partition);
    t.add(Receiver::string, "rpartition", str_rpartition);
    t.add(Receiver::string, "swapcase", str_swapcase);
    t.add(Receiver::string, "removeprefix", str_removeprefix);
    t.add(Receiver::string, "removesuffix", str_removesuffix);
    t.add(Receiver::string, "center", str_center);
    t.add(Receiver::string, "expandtabs", str_expandtabs);
    t.add(Receiver::string, "isascii", str_isascii);
    t.add(Receiver::string, "isnumeric", all_code_points<is_numeric_code_point>);
    t.add(Receiver::string, "istitle", str_istitle);
    // Python has these too; refused rather than undefined, so the error says what is missing.
    t.add(Receiver::string, "casefold", str_casefold);
    for (const char* name : {"encode", "isidentifier", "isprintable", "translate", "maketrans"})
      t.refuse(Receiver::string, name, "is not built in this interpreter (docs/data.md)");
    t.add(Receiver::dict, "items", dict_items);
    t.add(Receiver::dict, "keys", dict_keys);
    t.add(Receiver::dict, "values", dict_values);
    t.add(Receiver::dict, "get", dict_get);
    t.add(Receiver::dict, "copy", dict_copy);
    for (const char* name : {"pop", "popitem", "update", "setdefault", "clear"})
      t.refuse(Receiver::dict, name, "modifies a dict, which transformers' sandbox refuses");
    t.add(Receiver::list, "index", list_index);
    t.add(Receiver::list, "count", list_count);
    t.add(Receiver::list, "copy", list_copy);
    for (const char* name :
         {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear"})
      t.refuse(Receiver::list, name, "modifies a list, which transformers' sandbox refuses");
    return t;
  }();
  return table;
}

// The str methods markupsafe 3's Markup overrides: the result (each string of a list or tuple
// result) is Markup; replace escapes its replacement, ljust / rjust / center their fill
// character, join every item; the others escape nothing.
struct MarkupMethod {
  const char* name;
  int escaped_argument;  // the positional argument escaped, -1 none, -2 every joined item
};

const MarkupMethod* markup_method(std::string_view name) {
  static const MarkupMethod methods[] = {
      {"capitalize", -1},   {"title", -1},      {"lower", -1},      {"upper", -1},
      {"swapcase", -1},     {"casefold", -1},   {"replace", 1},     {"ljust", 1},
      {"rjust", 1},         {"center", 1},      {"strip", -1},      {"lstrip", -1},
      {"rstrip", -1},       {"zfill", -1},      {"expandtabs", -1}, {"removeprefix", -1},
      {"removesuffix", -1}, {"partition", -1},  {"rpartition", -1}, {"split", -1},
      {"rsplit", -1},       {"splitlines", -1}, {"join", -2}};
  for (const MarkupMethod& method : methods) {
    if (name == method.name) return &method;
  }
  return nullptr;
}

Value escaped_argument(const Value& v) {
  return v.is_string() && !v.is_markup() ? Value::markup(escape_html(v.text())) : v;
}

Value markup_call(const Value& self, MethodFunction function, const CallArguments& arguments,
                  int escaped, int line) {
  CallArguments passed = arguments;
  if (escaped >= 0 && static_cast<std::size_t>(escaped) < passed.positional.size()) {
    passed.positional[static_cast<std::size_t>(escaped)] =
        escaped_argument(passed.positional[static_cast<std::size_t>(escaped)]);
  }
  if (escaped == -2 && !passed.positional.empty()) {
    ValueList items;
    for (const Value& item : iterate(passed.positional[0], line))
      items.push_back(escaped_argument(item));
    passed.positional[0] = Value::list(std::move(items));
  }
  const Value result = function(self, passed, line);
  if (result.is_string()) return Value::markup(result.text());
  if (!result.is_list()) return result;
  ValueList items;
  for (const Value& item : result.items())
    items.push_back(item.is_string() ? Value::markup(item.text()) : item);
  return Value::list(std::move(items), result.is_tuple());
}

}  // namespace

void MethodTable::add(Receiver receiver, const std::string& name, MethodFunction function) {
  entries_[static_cast<int>(receiver)][name] = Entry{function, nullptr};
}

void MethodTable::refuse(Receiver receiver, const std::string& name, const char* reason) {
  entries_[static_cast<int>(receiver)][name] = Entry{nullptr, reason};
}

const MethodTable::Entry* MethodTable::find(Receiver receiver, std::string_view name) const {
  const auto& entries = entries_[static_cast<int>(receiver)];
  const auto found = entries.find(name);
  return found == entries.end() ? nullptr : &found->second;
}

Value bound_method(const Value& self, const std::string& name, int line) {
  Receiver receiver = Receiver::string;
  const char* type = "str";
  if (self.is_list()) {
    receiver = Receiver::list;
    type = "list";
  } else if (self.is_dict()) {
    receiver = Receiver::dict;
    type = "dict";
  }
  const MethodTable::Entry* entry = methods().find(receiver, name);
  if (entry == nullptr) return Value();
  if (entry->refusal != nullptr) {
    const std::string message = std::string(type) + "." + name + "() " + entry->refusal;
    return Value::callable([message, line](CallArguments&) -> Value { fail(line, message); }, name);
  }
  const MethodFunction function = entry->function;
  if (const MarkupMethod* wrapped = self.is_markup() ? markup_method(name) : nullptr) {
    return Value::callable(
        [self, function, line, escaped = wrapped->escaped_argument](CallArguments& arguments) {
          return markup_call(self, function, arguments, escaped, line);
        },
        name);
  }
  return Value::callable(
      [self, function, line](CallArguments& arguments) { return function(self, arguments, line); },
      name);
}

}  // namespace dyncp::data::jinja
