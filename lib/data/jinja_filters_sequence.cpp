// Filters over lists and dicts: jinja2.filters' do_length (count), do_join, do_first, do_last,
// do_list, do_reverse, do_items, do_select / reject / selectattr / rejectattr, do_map,
// do_unique, do_sort, do_min, do_max, do_sum, do_dictsort, do_groupby, do_batch, do_slice,
// do_attr, do_random.
#include <algorithm>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

Value length(const Value& v, const CallArguments&, int line) {
  return Value::integer(length_of(v, line));
}

Value join(const Value& input, const CallArguments& arguments, int line) {
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

Value first(const Value& v, const CallArguments&, int line) {
  const ValueList items = iterate(v, line);
  return items.empty() ? Value::undefined_named("first item") : items.front();
}

Value last(const Value& v, const CallArguments&, int line) {
  const ValueList items = iterate(v, line);
  return items.empty() ? Value::undefined_named("last item") : items.back();
}

Value list(const Value& v, const CallArguments&, int line) {
  return Value::list(iterate(v, line));
}

Value reverse(const Value& v, const CallArguments&, int line) {
  if (v.is_string()) {
    std::u32string code_points = decode(v.text());
    std::reverse(code_points.begin(), code_points.end());
    return Value::string(encode(code_points));
  }
  ValueList items = iterate(v, line);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value items(const Value& v, const CallArguments&, int line) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict() || v.dict_ptr()->is_namespace)
    fail(line, "Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [key, item] : v.dict_ptr()->entries)
    pairs.push_back(Value::list({Value::string(key), item}, true));
  return Value::list(std::move(pairs));
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

Value selectattr(const Value& v, const CallArguments& a, int line) {
  return select_items(v, a, true, true, line);
}
Value rejectattr(const Value& v, const CallArguments& a, int line) {
  return select_items(v, a, true, false, line);
}
Value select(const Value& v, const CallArguments& a, int line) {
  return select_items(v, a, false, true, line);
}
Value reject(const Value& v, const CallArguments& a, int line) {
  return select_items(v, a, false, false, line);
}

Value map(const Value& v, const CallArguments& a, int line) {
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
}

Value unique(const Value& v, const CallArguments&, int line) {
  ValueList kept;
  for (const Value& item : iterate(v, line)) {
    bool seen = false;
    for (const Value& previous : kept) seen |= python_equal(previous, item);
    if (!seen) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value sort(const Value& v, const CallArguments& a, int line) {
  ValueList sorted = iterate(v, line);
  const bool descending = argument_or(a, 0, "reverse", Value::boolean(false)).truthy();
  const std::optional<Value> attribute = a.get(2, "attribute");
  const auto key = [&](const Value& item) {
    Value k = attribute ? attribute_path(item, python_str(*attribute), line) : item;
    return k.is_string() ? Value::string(map_case(k.text(), false)) : k;  // case-insensitive
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& x, const Value& y) {
    return descending ? python_less(key(y), key(x), line) : python_less(key(x), key(y), line);
  });
  return Value::list(std::move(sorted));
}

Value min(const Value& v, const CallArguments&, int line) {
  const ValueList all = iterate(v, line);
  if (all.empty()) return Value::undefined_named("min of an empty sequence");
  return *std::min_element(all.begin(), all.end(),
                           [&](const Value& x, const Value& y) { return python_less(x, y, line); });
}

Value max(const Value& v, const CallArguments&, int line) {
  const ValueList all = iterate(v, line);
  if (all.empty()) return Value::undefined_named("max of an empty sequence");
  return *std::max_element(all.begin(), all.end(),
                           [&](const Value& x, const Value& y) { return python_less(x, y, line); });
}

Value sum(const Value& v, const CallArguments& a, int line) {
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
}

}  // namespace

void register_sequence_filters(FilterTable& table) {
  table.add("length", length, OnUndefined::accept);
  table.add("count", length, OnUndefined::accept);
  table.add("join", join, OnUndefined::accept);
  table.add("first", first, OnUndefined::accept);
  table.add("last", last, OnUndefined::accept);
  table.add("list", list, OnUndefined::accept);
  table.add("reverse", reverse, OnUndefined::accept);
  table.add("items", items, OnUndefined::accept);
  table.add("selectattr", selectattr, OnUndefined::accept);
  table.add("rejectattr", rejectattr, OnUndefined::accept);
  table.add("select", select, OnUndefined::accept);
  table.add("reject", reject, OnUndefined::accept);
  table.add("map", map, OnUndefined::accept);
  table.add("unique", unique, OnUndefined::accept);
  table.add("sort", sort, OnUndefined::accept);
  table.add("min", min);
  table.add("max", max);
  table.add("sum", sum);
}

}  // namespace dyncp::data::jinja
