// Filters that spell values as text: transformers' tojson (json.dumps), jinja2.filters'
// do_default, do_mark_safe (safe), soft_str (string), escape.
#include <algorithm>

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

Value safe(const Value& v, const CallArguments&, int) {
  return v.is_string() ? v : Value::string(python_str(v));
}

Value string(const Value& v, const CallArguments&, int) {
  return Value::string(python_str(v));
}

Value escape(const Value& v, const CallArguments&, int) {
  return Value::string(escape_html(python_str(v)));
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
}

}  // namespace dyncp::data::jinja
