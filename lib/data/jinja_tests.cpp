// Tests (`x is name(arguments)`): jinja2.tests.TESTS.
#include <cmath>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

const Value& argument(const CallArguments& a, int line) {
  if (a.positional.empty()) fail(line, "this test needs an argument");
  return a.positional[0];
}

bool is_sequence(const Value& v) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.dict_ptr()->is_namespace);
}

bool defined(const Value& v, const CallArguments&, int) {
  return !v.is_undefined();
}
bool undefined(const Value& v, const CallArguments&, int) {
  return v.is_undefined();
}
bool none(const Value& v, const CallArguments&, int) {
  return v.is_none();
}
bool string(const Value& v, const CallArguments&, int) {
  return v.is_string();
}
bool number(const Value& v, const CallArguments&, int) {
  return v.is_number();
}
bool integer(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::big_integer;
}
bool floating(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::floating;
}
bool boolean(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::boolean;
}
bool is_true(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::boolean && v.as_bool();
}
bool is_false(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::boolean && !v.as_bool();
}
bool mapping(const Value& v, const CallArguments&, int) {
  return v.is_dict() && !v.dict_ptr()->is_namespace && !v.dict_ptr()->call;
}
// Jinja's Undefined has __len__ and __getitem__, so it passes `sequence` and `iterable`.
bool sequence(const Value& v, const CallArguments&, int) {
  return is_sequence(v) || v.is_undefined();
}
bool callable(const Value& v, const CallArguments&, int) {
  return v.kind() == Value::Kind::callable || (v.is_dict() && v.dict_ptr()->call);
}
// value % 2 with Python's sign rule; floats too (2.0 is even).
double python_mod2(const Value& v, const char* test, int line) {
  if (v.kind() == Value::Kind::floating) {
    const double remainder = std::fmod(v.as_double(), 2.0);
    return remainder < 0 ? remainder + 2.0 : remainder;
  }
  const std::int64_t remainder = require_int(v, test, line) % 2;
  return static_cast<double>(remainder < 0 ? remainder + 2 : remainder);
}
bool odd(const Value& v, const CallArguments&, int line) {
  return python_mod2(v, "odd", line) == 1.0;
}
bool even(const Value& v, const CallArguments&, int line) {
  return python_mod2(v, "even", line) == 0.0;
}
bool divisibleby(const Value& v, const CallArguments& a, int line) {
  const std::int64_t divisor = require_int(argument(a, line), "divisibleby", line);
  if (divisor == 0) fail(line, "integer division or modulo by zero");
  return require_int(v, "divisibleby", line) % divisor == 0;
}
bool eq(const Value& v, const CallArguments& a, int line) {
  return python_equal(v, argument(a, line));
}
bool ne(const Value& v, const CallArguments& a, int line) {
  return !python_equal(v, argument(a, line));
}
bool lt(const Value& v, const CallArguments& a, int line) {
  return python_less(v, argument(a, line), line);
}
bool gt(const Value& v, const CallArguments& a, int line) {
  return python_less(argument(a, line), v, line);
}
bool le(const Value& v, const CallArguments& a, int line) {
  return !python_less(argument(a, line), v, line);
}
bool ge(const Value& v, const CallArguments& a, int line) {
  return !python_less(v, argument(a, line), line);
}
bool sameas(const Value& v, const CallArguments& a, int line) {
  const Value& other = argument(a, line);
  if (v.kind() != other.kind()) return false;
  if (v.is_dict()) return v.dict_ptr() == other.dict_ptr();
  if (v.is_list()) return v.list_ptr() == other.list_ptr();
  return python_equal(v, other);
}
bool in(const Value& v, const CallArguments& a, int line) {
  const Value& container = argument(a, line);
  for (const Value& item : iterate(container, line)) {
    if (container.is_string() ? item.text() == python_str(v) : python_equal(item, v)) return true;
  }
  return container.is_string() && v.is_string() &&
         container.text().find(v.text()) != std::string::npos;
}
bool lower(const Value& v, const CallArguments&, int) {
  return v.is_string() && map_case(v.text(), false) == v.text();
}
bool upper(const Value& v, const CallArguments&, int) {
  return v.is_string() && map_case(v.text(), true) == v.text();
}

bool escaped(const Value& v, const CallArguments&, int) {
  return v.is_markup();
}
bool names_filter(const Value& v, const CallArguments&, int) {
  return v.is_string() && is_known_filter(v.text());
}
bool names_test(const Value& v, const CallArguments&, int) {
  return v.is_string() && is_known_test(v.text());
}

const TestTable& tests() {
  static const TestTable table = [] {
    TestTable t;
    t.add("defined", defined);
    t.add("undefined", undefined);
    t.add("none", none);
    t.add("string", string);
    t.add("number", number);
    t.add("integer", integer);
    t.add("float", floating);
    t.add("boolean", boolean);
    t.add("true", is_true);
    t.add("false", is_false);
    t.add("mapping", mapping);
    t.add("sequence", sequence);
    t.add("iterable", sequence);
    t.add("callable", callable);
    t.add("odd", odd);
    t.add("even", even);
    t.add("divisibleby", divisibleby);
    for (const char* name : {"eq", "equalto", "=="}) t.add(name, eq);
    for (const char* name : {"ne", "!="}) t.add(name, ne);
    for (const char* name : {"lt", "lessthan", "<"}) t.add(name, lt);
    for (const char* name : {"gt", "greaterthan", ">"}) t.add(name, gt);
    for (const char* name : {"le", "<="}) t.add(name, le);
    for (const char* name : {"ge", ">="}) t.add(name, ge);
    t.add("sameas", sameas);
    t.add("in", in);
    t.add("lower", lower);
    t.add("upper", upper);
    t.add("escaped", escaped);
    t.add("filter", names_filter);
    t.add("test", names_test);
    return t;
  }();
  return table;
}

}  // namespace

void TestTable::add(const std::string& name, TestFunction function) {
  entries_[name] = function;
}

TestFunction TestTable::find(std::string_view name) const {
  const auto found = entries_.find(name);
  return found == entries_.end() ? nullptr : found->second;
}

bool is_known_test(std::string_view name) {
  return tests().find(name) != nullptr;
}

bool apply_test(const std::string& name, const Value& input, const CallArguments& arguments,
                int line) {
  const TestFunction test = tests().find(name);
  if (test == nullptr) fail(line, "no test named '" + name + "'");
  return test(input, arguments, line);
}

}  // namespace dyncp::data::jinja
