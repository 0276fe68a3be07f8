// Filters that spell values as text: transformers' tojson (json.dumps), jinja2.filters'
// do_default, do_mark_safe (safe), soft_str (string), escape, do_forceescape, do_xmlattr,
// do_urlencode, do_pprint, (do_urlize is in jinja_filters_urlize.cpp).
#include <algorithm>
#include <cctype>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

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
    options.item_separator.assign(1, ',');  // json.dumps' default separators once indent is set
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

Value default_filter(const Value& v, const CallArguments& a, int) {
  const bool boolean = argument_or(a, 1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy()))
    return argument_or(a, 0, "default_value", Value::string(""));
  return v;
}

// Markup(value): printed as it is, and escape() leaves it so.
Value safe(const Value& v, const CallArguments&, int) {
  return v.is_markup() ? v : Value::markup(python_str(v));
}

// soft_str: a Markup stays one.
Value string(const Value& v, const CallArguments&, int) {
  return v.is_markup() ? v : Value::string(python_str(v));
}

Value escape(const Value& v, const CallArguments&, int) {
  return v.is_markup() ? v : Value::markup(escape_html(python_str(v)));
}

Value forceescape(const Value& v, const CallArguments&, int) {
  return Value::markup(escape_html(python_str(v)));
}

std::string escape_unless_markup(const Value& v) {
  return v.is_markup() ? v.text() : escape_html(python_str(v));
}

Value xmlattr(const Value& v, const CallArguments& a, int line) {
  if (!v.is_dict() || v.dict_ptr()->is_namespace)
    fail(line, "xmlattr needs a mapping, got " + python_type_name(v));
  const bool autospace = argument_or(a, 0, "autospace", Value::boolean(true)).truthy();
  std::string out;
  for (const auto& [key, item] : v.dict_ptr()->entries) {
    if (item.is_none() || item.is_undefined()) continue;
    if (key.find_first_of(" \t\n\r\f\v/>=") != std::string::npos)
      fail(line, "Invalid character in attribute name: " + python_repr(Value::string(key)));
    if (!out.empty()) out += " ";
    out += escape_html(key) + "=\"" + escape_unless_markup(item) + "\"";
  }
  if (autospace && !out.empty()) out = " " + out;
  return Value::string(std::move(out));
}

// urllib.parse.quote_from_bytes of the UTF-8 bytes, keeping `safe`.
std::string url_quote(const Value& v, bool for_query) {
  static const char* const hex = "0123456789ABCDEF";
  std::string out;
  for (const char c : python_str(v)) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '_' || c == '.' || c == '-' || c == '~' ||
        (c == '/' && !for_query)) {
      out.push_back(c);
    } else if (c == ' ' && for_query) {
      out.push_back('+');
    } else {
      out += {'%', hex[byte >> 4], hex[byte & 15]};
    }
  }
  return out;
}

Value urlencode(const Value& v, const CallArguments&, int line) {
  if (v.is_string() || (!v.is_list() && !v.is_dict())) return Value::string(url_quote(v, false));
  ValueList pairs;
  if (v.is_dict()) {
    for (const auto& [key, item] : v.dict_ptr()->entries)
      pairs.push_back(Value::list({Value::string(key), item}, true));
  } else {
    pairs = v.items();
  }
  std::string out;
  for (const Value& pair : pairs) {
    const ValueList parts = iterate(pair, line);
    if (parts.size() != 2) fail(line, "urlencode needs (key, value) pairs");
    if (!out.empty()) out += "&";
    out += url_quote(parts[0], true) + "=" + url_quote(parts[1], true);
  }
  return Value::string(std::move(out));
}

// pprint.pformat(value) (width 80, dicts sorted by key).
void pretty(const Value& v, std::size_t indent, std::size_t allowance, int level, std::string& out);

std::string sorted_repr(const Value& v) {
  if (v.is_dict() && !v.dict_ptr()->is_namespace) {
    auto entries = v.dict_ptr()->entries;
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::string out = "{";
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += ", ";
      out += python_repr(Value::string(entries[i].first)) + ": " + sorted_repr(entries[i].second);
    }
    return out + "}";
  }
  if (v.is_list() && !v.tuple_fields()) {
    std::string out = v.is_tuple() ? "(" : "[";
    for (std::size_t i = 0; i < v.items().size(); ++i) {
      if (i > 0) out += ", ";
      out += sorted_repr(v.items()[i]);
    }
    if (v.is_tuple() && v.items().size() == 1) out += ",";
    return out + (v.is_tuple() ? ")" : "]");
  }
  return python_repr(v);
}

std::int64_t repr_width(const std::string& text) {
  return code_point_count(python_repr(Value::string(text)));
}

// PrettyPrinter._pprint_str: a string too long for its line is cut after whitespace into
// literals Python would concatenate, parenthesized at the top level.
void pretty_string(const std::string& text, std::int64_t indent, std::int64_t allowance, int level,
                   std::string& out) {
  constexpr std::int64_t width = 80;
  std::vector<std::string> lines;  // str.splitlines(keepends=True) for \n, \r\n and \r
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find_first_of("\r\n", start);
    if (end == std::string::npos) {
      end = text.size();
    } else {
      end += text.compare(end, 2, "\r\n") == 0 ? 2 : 1;
    }
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  if (level == 1) {
    ++indent;
    ++allowance;
  }
  const std::int64_t max_width = width - indent;
  std::int64_t max_width1 = max_width;
  std::vector<std::string> chunks;
  std::string rep;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const bool last_line = i + 1 == lines.size();
    rep = python_repr(Value::string(lines[i]));
    if (last_line) max_width1 -= allowance;
    if (code_point_count(rep) <= max_width1) {
      chunks.push_back(rep);
      continue;
    }
    std::vector<std::string> parts;  // re.findall(r"\S*\s*") without its final empty match
    const std::u32string code_points = decode(lines[i]);
    for (std::size_t p = 0; p < code_points.size();) {
      std::size_t q = p;
      while (q < code_points.size() && !is_python_space(code_points[q])) ++q;
      while (q < code_points.size() && is_python_space(code_points[q])) ++q;
      parts.push_back(encode(std::u32string_view(code_points).substr(p, q - p)));
      p = q;
    }
    std::int64_t max_width2 = max_width;
    std::string current;
    for (std::size_t j = 0; j < parts.size(); ++j) {
      const std::string candidate = current + parts[j];
      if (j + 1 == parts.size() && last_line) max_width2 -= allowance;
      if (repr_width(candidate) > max_width2) {
        if (!current.empty()) chunks.push_back(python_repr(Value::string(current)));
        current = parts[j];
      } else {
        current = candidate;
      }
    }
    if (!current.empty()) chunks.push_back(python_repr(Value::string(current)));
  }
  if (chunks.size() == 1) {
    out += rep;
    return;
  }
  if (level == 1) out += "(";
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
    out += chunks[i];
  }
  if (level == 1) out += ")";
}

void pretty(const Value& v, std::size_t indent, std::size_t allowance, int level,
            std::string& out) {
  const std::string rep = sorted_repr(v);
  constexpr std::size_t width = 80;
  if (static_cast<std::size_t>(code_point_count(rep)) + indent + allowance <= width) {
    out += rep;
    return;
  }
  if (v.is_dict() && !v.dict_ptr()->is_namespace && !v.dict_ptr()->entries.empty()) {
    auto entries = v.dict_ptr()->entries;
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    out += "{";
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const bool last = i + 1 == entries.size();
      const std::string key = python_repr(Value::string(entries[i].first));
      out += key + ": ";
      pretty(entries[i].second, indent + 1 + static_cast<std::size_t>(code_point_count(key)) + 2,
             last ? allowance + 1 : 1, level + 1, out);
      if (!last) out += ",\n" + std::string(indent + 1, ' ');
    }
    out += "}";
    return;
  }
  if (v.is_list() && !v.tuple_fields() && !v.items().empty()) {
    out += v.is_tuple() ? "(" : "[";
    const ValueList& items = v.items();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const bool last = i + 1 == items.size();
      const std::size_t tail = v.is_tuple() && items.size() == 1 ? 1 : 0;
      pretty(items[i], indent + 1, last ? allowance + 1 + tail : 1, level + 1, out);
      if (!last) out += ",\n" + std::string(indent + 1, ' ');
    }
    if (v.is_tuple() && items.size() == 1) out += ",";
    out += v.is_tuple() ? ")" : "]";
    return;
  }
  if (v.is_string() && !v.is_markup() && !v.text().empty()) {
    pretty_string(v.text(), static_cast<std::int64_t>(indent), static_cast<std::int64_t>(allowance),
                  level + 1, out);
    return;
  }
  out += rep;
}

Value pprint(const Value& v, const CallArguments&, int) {
  std::string out;
  pretty(v, 0, 0, 0, out);
  return Value::string(std::move(out));
}

}  // namespace

void register_output_filters(FilterTable& table) {
  table.add("tojson", tojson_filter, OnUndefined::accept);
  table.add("default", default_filter, OnUndefined::accept);
  table.add("d", default_filter, OnUndefined::accept);
  table.add("safe", safe, OnUndefined::accept);
  table.add("string", string, OnUndefined::accept);
  table.add("escape", escape, OnUndefined::accept);
  table.add("e", escape, OnUndefined::accept);
  table.add("forceescape", forceescape);
  table.add("xmlattr", xmlattr);
  table.add("urlencode", urlencode);
  table.add("pprint", pprint, OnUndefined::accept);
}

}  // namespace dyncp::data::jinja
