#pragma once
// Registration tables of the interpreter's filters, tests and object methods. Each kind of
// builtin lives in its own file (jinja_filters_*.cpp, jinja_tests.cpp, jinja_methods.cpp) and
// registers its entries here; adding a filter, test or method is one add() in that file.
// Internal to the interpreter.

#include <map>
#include <string>
#include <string_view>

#include "data/jinja_syntax.hpp"

namespace dyncp::data::jinja {

// A filter: `input | name(arguments)`.
using FilterFunction = Value (*)(const Value& input, const CallArguments& arguments, int line);
// A test: `input is name(arguments)`.
using TestFunction = bool (*)(const Value& input, const CallArguments& arguments, int line);
// A method of a str, list or dict: `self.name(arguments)`.
using MethodFunction = Value (*)(const Value& self, const CallArguments& arguments, int line);

// Jinja's Undefined refuses to be read, so most filters raise on it; these do not.
enum class OnUndefined { raise, accept };

class FilterTable {
 public:
  struct Entry {
    FilterFunction function = nullptr;
    OnUndefined on_undefined = OnUndefined::raise;
  };
  void add(const std::string& name, FilterFunction function,
           OnUndefined on_undefined = OnUndefined::raise);
  const Entry* find(std::string_view name) const;
  std::size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, Entry, std::less<>> entries_;
};

class TestTable {
 public:
  void add(const std::string& name, TestFunction function);
  TestFunction find(std::string_view name) const;
  std::size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, TestFunction, std::less<>> entries_;
};

// Methods by receiver type. A method registered as refused raises `reason` when called (the
// methods transformers' sandbox refuses: those that modify a list or dict).
class MethodTable {
 public:
  enum class Receiver { string, list, dict };
  struct Entry {
    MethodFunction function = nullptr;
    const char* refusal = nullptr;
  };
  void add(Receiver receiver, const std::string& name, MethodFunction function);
  void refuse(Receiver receiver, const std::string& name, const char* reason);
  const Entry* find(Receiver receiver, std::string_view name) const;

 private:
  std::map<std::string, Entry, std::less<>> entries_[3];
};

// `self.name` as a bound method: a callable, or undefined when `self`'s type has no such
// method (dicts then look the name up as a key).
Value bound_method(const Value& self, const std::string& name, int line);

void register_text_filters(FilterTable& table);
void register_sequence_filters(FilterTable& table);
void register_number_filters(FilterTable& table);
void register_output_filters(FilterTable& table);
void register_urlize_filter(FilterTable& table);

}  // namespace dyncp::data::jinja
