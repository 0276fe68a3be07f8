// Attribute, item and slice access, iteration and len() with Python's rules, as Jinja's
// sandbox exposes them to templates.
#include <algorithm>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

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
      Value method_value = bound_method(object, name, line);
      if (!method_value.is_undefined()) return method_value;
      const Value* found = object.dict_ptr()->find(name);
      return found ? *found
                   : Value::undefined_named("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::string:
    case Value::Kind::list: {
      if (const auto& fields = object.tuple_fields()) {
        for (std::size_t i = 0; i < fields->names.size(); ++i) {
          if (fields->names[i] == name) return object.items()[i];
        }
      }
      Value method_value = bound_method(object, name, line);
      if (!method_value.is_undefined()) return method_value;
      return Value::undefined_named("'" + python_type_name(object) + " object' has no attribute '" +
                                    name + "'");
    }
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
      return (object.is_markup() ? Value::markup : Value::string)(
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
  if (object.is_string())
    return object.is_markup() ? Value::markup(encode(text)) : Value::string(encode(text));
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

}  // namespace dyncp::data::jinja
