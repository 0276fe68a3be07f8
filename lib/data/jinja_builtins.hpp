#pragma once
// The filters, tests, object methods, globals and attribute rules of the Jinja interpreter, with
// the behaviour of Jinja 3 running in transformers' ImmutableSandboxedEnvironment (methods that
// mutate lists and dicts are refused there, and here). Each kind lives in its own file and
// registers itself in a table (jinja_registry.hpp): jinja_filters_*.cpp, jinja_tests.cpp,
// jinja_methods.cpp, jinja_globals.cpp; attribute and item access in jinja_access.cpp. Internal
// to the interpreter; errors are TemplateError at the calling expression's line.

#include <string>
#include <string_view>

#include "data/jinja_syntax.hpp"

namespace dyncp::data::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(const std::string& name, const Value& input, const CallArguments& arguments,
                   int line);
bool apply_test(const std::string& name, const Value& input, const CallArguments& arguments,
                int line);

// obj.name: dict methods and keys, str and list methods, namespace attributes; Undefined for
// anything missing (an error only when the object itself is undefined).
Value get_attribute(const Value& object, const std::string& name, int line);
// obj[key]: list and string indexing (negative indices as Python), dict keys, then attributes.
Value get_item(const Value& object, const Value& key, int line);
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                int line);

// Python iteration: list items, dict keys, string characters; Undefined is empty.
ValueList iterate(const Value& value, int line);
// Python len(); Undefined has length 0.
std::int64_t length_of(const Value& value, int line);

// The error Jinja raises when an undefined value is used (printed as "'name' is undefined").
[[noreturn]] void throw_undefined(const Value& value, int line);

// Globals transformers gives chat templates: range, namespace, dict, raise_exception,
// strftime_now.
void add_globals(Dict& globals);

}  // namespace dyncp::data::jinja
