// Filters over lists and dicts: jinja2.filters' do_length (count), do_join, do_first, do_last,
// do_list, do_reverse, do_items, do_select / reject / selectattr / rejectattr, do_map,
// do_unique, do_sort, do_min, do_max, do_sum, do_dictsort, do_groupby, do_batch, do_slice,
// do_attr, do_random.
#include <algorithm>
#include <functional>

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

// jinja2's ignore_case: strings compare lower-cased unless case_sensitive.
Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(map_case(v.text(), false)) : v;
}

// make_attrgetter: the item itself, or its attribute="a.b.0" (undefined replaced by `fallback`).
Value attribute_of(const Value& item, const std::optional<Value>& attribute, const Value& fallback,
                   int line) {
  if (!attribute || attribute->is_none()) return item;
  Value value = attribute->is_string() ? attribute_path(item, attribute->text(), line)
                                       : get_item(item, *attribute, line);
  if (value.is_undefined() && !fallback.is_none()) return fallback;
  return value;
}

bool case_sensitive_argument(const CallArguments& a, std::size_t index) {
  return argument_or(a, index, "case_sensitive", Value::boolean(false)).truthy();
}

// Python sets hold only hashable values: not lists or dicts (nor tuples holding them).
void require_hashable(const Value& v, int line) {
  if (v.is_dict() || (v.is_list() && !v.is_tuple()))
    fail(line, "unhashable type: '" + python_type_name(v) + "'");
  if (v.is_list()) {
    for (const Value& item : v.items()) require_hashable(item, line);
  }
}

Value unique(const Value& v, const CallArguments& a, int line) {
  const bool case_sensitive = case_sensitive_argument(a, 0);
  const std::optional<Value> attribute = a.get(1, "attribute");
  ValueList kept;
  ValueList keys;
  for (const Value& item : iterate(v, line)) {
    const Value key = fold_case(attribute_of(item, attribute, Value::none(), line), case_sensitive);
    require_hashable(key, line);
    bool seen = false;
    for (const Value& previous : keys) seen = seen || python_equal(previous, key);
    if (seen) continue;
    keys.push_back(key);
    kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

// make_multi_attrgetter: attribute="age,name" sorts by several attributes.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive,
               int line) {
  if (!attribute || attribute->is_none()) return fold_case(item, case_sensitive);
  if (!attribute->is_string()) return fold_case(get_item(item, *attribute, line), case_sensitive);
  ValueList parts;
  const Value names = split(attribute->text(), Value::string(","), std::nullopt, line);
  for (const Value& name : names.items())
    parts.push_back(fold_case(attribute_path(item, name.text(), line), case_sensitive));
  return Value::list(std::move(parts));
}

Value sort(const Value& v, const CallArguments& a, int line) {
  ValueList sorted = iterate(v, line);
  const bool descending = argument_or(a, 0, "reverse", Value::boolean(false)).truthy();
  const bool case_sensitive = case_sensitive_argument(a, 1);
  const std::optional<Value> attribute = a.get(2, "attribute");
  ValueList keys;
  for (const Value& item : sorted) keys.push_back(sort_key(item, attribute, case_sensitive, line));
  std::vector<std::size_t> order(sorted.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Python's sorted(reverse=True) keeps equal items in their original order, as this does.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return descending ? python_less(keys[y], keys[x], line) : python_less(keys[x], keys[y], line);
  });
  ValueList out;
  for (const std::size_t i : order) out.push_back(sorted[i]);
  return Value::list(std::move(out));
}

Value min_or_max(const Value& v, const CallArguments& a, bool want_max, int line) {
  const ValueList all = iterate(v, line);
  if (all.empty()) return Value::undefined_named("No aggregated item, sequence was empty.");
  const bool case_sensitive = case_sensitive_argument(a, 0);
  const std::optional<Value> attribute = a.get(1, "attribute");
  std::size_t best = 0;
  Value best_key = fold_case(attribute_of(all[0], attribute, Value::none(), line), case_sensitive);
  for (std::size_t i = 1; i < all.size(); ++i) {
    Value key = fold_case(attribute_of(all[i], attribute, Value::none(), line), case_sensitive);
    if (want_max ? python_less(best_key, key, line) : python_less(key, best_key, line)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return all[best];
}

Value min(const Value& v, const CallArguments& a, int line) {
  return min_or_max(v, a, false, line);
}

Value max(const Value& v, const CallArguments& a, int line) {
  return min_or_max(v, a, true, line);
}

Value sum(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> attribute = a.get(0, "attribute");
  const Value start = argument_or(a, 1, "start", Value::integer(0));
  if (!start.is_number() || start.kind() == Value::Kind::big_integer)
    fail(line, "sum(start=...) needs a number, got " + python_type_name(start));
  bool as_float = start.kind() == Value::Kind::floating;
  std::int64_t integer = as_float ? 0 : start.as_int();
  double floating = start.as_double();
  for (const Value& item : iterate(v, line)) {
    const Value x = attribute_of(item, attribute, Value::none(), line);
    if (!x.is_number() || x.kind() == Value::Kind::big_integer)
      fail(line, "sum() needs numbers, got " + python_type_name(x));
    if (x.kind() == Value::Kind::floating) as_float = true;
    if (x.kind() != Value::Kind::floating && __builtin_add_overflow(integer, x.as_int(), &integer))
      fail(line, "integer overflow beyond 64 bits in sum()");
    floating += x.as_double();
  }
  return as_float ? Value::floating(floating) : Value::integer(integer);
}

Value dictsort(const Value& v, const CallArguments& a, int line) {
  if (!v.is_dict() || v.dict_ptr()->is_namespace)
    fail(line, "dictsort needs a mapping, got " + python_type_name(v));
  const bool case_sensitive = case_sensitive_argument(a, 0);
  const std::string by = python_str(argument_or(a, 1, "by", Value::string("key")));
  if (by != "key" && by != "value") fail(line, "You can only sort by either \"key\" or \"value\"");
  const bool descending = argument_or(a, 2, "reverse", Value::boolean(false)).truthy();
  ValueList pairs;
  for (const auto& [key, item] : v.dict_ptr()->entries)
    pairs.push_back(Value::list({Value::string(key), item}, true));
  const std::size_t position = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value kx = fold_case(x.items()[position], case_sensitive);
    const Value ky = fold_case(y.items()[position], case_sensitive);
    return descending ? python_less(ky, kx, line) : python_less(kx, ky, line);
  });
  return Value::list(std::move(pairs));
}

Value groupby(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> attribute = a.get(0, "attribute");
  if (!attribute) fail(line, "groupby needs an attribute");
  const Value fallback = argument_or(a, 1, "default", Value::none());
  const bool case_sensitive = case_sensitive_argument(a, 2);
  ValueList items = iterate(v, line);
  ValueList keys;
  for (const Value& item : items)
    keys.push_back(fold_case(attribute_of(item, attribute, fallback, line), case_sensitive));
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return python_less(keys[x], keys[y], line);
  });
  ValueList groups;
  for (std::size_t i = 0; i < order.size();) {
    ValueList members;
    std::size_t j = i;
    while (j < order.size() && python_equal(keys[order[j]], keys[order[i]]))
      members.push_back(items[order[j++]]);
    // The grouper is the first member's own (not lower-cased) value.
    Value grouper = attribute_of(members.front(), attribute, fallback, line);
    groups.push_back(Value::named_tuple("_GroupTuple", {"grouper", "list"},
                                        {std::move(grouper), Value::list(std::move(members))}));
    i = j;
  }
  return Value::list(std::move(groups));
}

Value batch(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> count_value = a.get(0, "linecount");
  if (!count_value) fail(line, "batch needs a line count");
  // jinja2's loop as it is: a count of 0 gives an empty first batch, a negative one a single
  // batch.
  const std::int64_t count = require_int(*count_value, "batch()", line);
  const Value fill = argument_or(a, 1, "fill_with", Value::none());
  ValueList rows;
  ValueList row;
  for (const Value& item : iterate(v, line)) {
    if (static_cast<std::int64_t>(row.size()) == count) {
      rows.push_back(Value::list(std::move(row)));
      row.clear();
    }
    row.push_back(item);
  }
  if (!row.empty()) {
    while (!fill.is_none() && static_cast<std::int64_t>(row.size()) < count) row.push_back(fill);
    rows.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(rows));
}

Value slice(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> count_value = a.get(0, "slices");
  if (!count_value) fail(line, "slice needs a slice count");
  const std::int64_t slices = require_int(*count_value, "slice()", line);
  if (slices <= 0) fail(line, "slice() needs a positive slice count");
  const Value fill = argument_or(a, 1, "fill_with", Value::none());
  const ValueList items = iterate(v, line);
  const auto length = static_cast<std::int64_t>(items.size());
  const std::int64_t per_slice = length / slices;
  const std::int64_t with_extra = length % slices;
  std::int64_t offset = 0;
  ValueList columns;
  for (std::int64_t number = 0; number < slices; ++number) {
    const std::int64_t start = offset + number * per_slice;
    if (number < with_extra) ++offset;
    const std::int64_t end = offset + (number + 1) * per_slice;
    ValueList column(items.begin() + start, items.begin() + end);
    if (!fill.is_none() && number >= with_extra) column.push_back(fill);
    columns.push_back(Value::list(std::move(column)));
  }
  return Value::list(std::move(columns));
}

// getattr(obj, name) in the sandbox: methods and namespace attributes, never dict keys.
Value attr(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> name_value = a.get(0, "name");
  if (!name_value) fail(line, "attr needs a name");
  const std::string name = python_str(*name_value);
  const Value missing = Value::undefined_named("'" + python_type_name(v) +
                                               " object' has no attribute '" + name + "'");
  if (name.starts_with("_")) return missing;  // the sandbox's unsafe attributes
  if (v.is_dict() && v.dict_ptr()->is_namespace) {
    const Value* found = v.dict_ptr()->find(name);
    return found ? *found : missing;
  }
  if (v.is_list() && v.tuple_fields()) {
    const auto& fields = v.tuple_fields()->names;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == name) return v.items()[i];
    }
  }
  if (v.is_string() || v.is_list() || v.is_dict()) {
    Value method = bound_method(v, name, line);
    if (!method.is_undefined()) return method;
  }
  return missing;
}

// jinja2 draws with Python's unseeded random.choice; any element is a possible result. The
// choice here is a function of the sequence's text, so a prepared cache is reproducible.
Value random(const Value& v, const CallArguments&, int line) {
  // random.choice indexes its argument: a dict's keys are strings, so jinja2 raises KeyError.
  if (v.is_dict()) fail(line, "KeyError: random of a mapping");
  const ValueList items = iterate(v, line);
  if (items.empty()) return Value::undefined_named("No random item, sequence was empty.");
  const std::size_t index = std::hash<std::string>{}(python_repr(v)) % items.size();
  return items[index];
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
  table.add("dictsort", dictsort);
  table.add("groupby", groupby);
  table.add("batch", batch);
  table.add("slice", slice);
  table.add("attr", attr);
  table.add("random", random);
}

}  // namespace dyncp::data::jinja
