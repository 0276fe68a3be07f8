#pragma once
// Values of the Jinja interpreter (jinja_template.hpp), with Python's semantics where chat
// templates can observe them: truthiness, equality, str() / repr() spelling (True, None,
// ['a', 1]), float repr (shortest round-trip, scientific outside [1e-4, 1e16)), and
// json.dumps as transformers' `tojson` filter calls it (ensure_ascii=False, keys in input order).
// Integers beyond 64 bits are kept as their decimal text: they print exactly, as Python's do,
// but refuse arithmetic.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dyncp::data::jinja {

class Value;
using ValueList = std::vector<Value>;

struct CallArguments;
// A global function, a bound method or a macro: called with evaluated arguments.
using Callable = std::function<Value(CallArguments&)>;

// An insertion-ordered dict with string keys (what JSON and templates produce).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;  // namespace(): attributes may be assigned with `set ns.x = ...`
  // Objects with attributes that can also be called (a recursive loop's `loop(...)`).
  Callable call;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

class Value {
 public:
  enum class Kind {
    undefined,
    none,
    boolean,
    integer,
    big_integer,
    floating,
    string,
    list,
    dict,
    callable
  };

  Value() = default;  // undefined
  static Value undefined_named(std::string name);
  static Value none();
  static Value boolean(bool value);
  static Value integer(std::int64_t value);
  static Value big_integer(std::string decimal_text);
  static Value floating(double value);
  static Value string(std::string text);
  // markupsafe's Markup: a string escape() leaves as it is, and that escapes what joins it.
  static Value markup(std::string text);
  static Value list(ValueList items, bool is_tuple = false);
  // A Python namedtuple (groupby's _GroupTuple): a tuple whose items are also attributes; it
  // prints as a plain tuple, as _GroupTuple does.
  static Value named_tuple(std::string type_name, std::vector<std::string> fields, ValueList items);
  static Value dict(std::shared_ptr<Dict> dict);
  static Value new_dict();
  static Value callable(Callable function, std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_number() const {
    return kind_ == Kind::integer || kind_ == Kind::floating || kind_ == Kind::big_integer ||
           kind_ == Kind::boolean;
  }
  bool is_tuple() const { return is_tuple_; }
  bool is_markup() const { return kind_ == Kind::string && is_markup_; }
  // namedtuple type name and field names; null for other values.
  struct TupleFields {
    std::string type_name;
    std::vector<std::string> names;
  };
  const std::shared_ptr<const TupleFields>& tuple_fields() const { return fields_; }

  bool as_bool() const { return bool_; }
  std::int64_t as_int() const { return int_; }
  double as_double() const;                          // integers and booleans widen
  const std::string& text() const { return text_; }  // string, big integer, or undefined's name
  const ValueList& items() const { return *list_; }
  const std::shared_ptr<ValueList>& list_ptr() const { return list_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const Callable& function() const { return *callable_; }

  bool truthy() const;

 private:
  Kind kind_ = Kind::undefined;
  bool bool_ = false;
  bool is_tuple_ = false;
  bool is_markup_ = false;
  std::int64_t int_ = 0;
  double double_ = 0.0;
  std::string text_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
  std::shared_ptr<const TupleFields> fields_;
};

struct CallArguments {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or the positional one at `index`, or nullopt.
  std::optional<Value> get(std::size_t index, std::string_view name) const;
};

// Python's == (1 == 1.0 == True, deep list and dict equality).
bool python_equal(const Value& a, const Value& b);
// Python's str(value); undefined prints as the empty string, as Jinja's does.
std::string python_str(const Value& value);
// Python's repr(value).
std::string python_repr(const Value& value);
std::string python_float_repr(double value);
// Python's type name for error messages (str, int, dict, NoneType, ...).
std::string python_type_name(const Value& value);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // None: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python json.dumps(value, ensure_ascii=False, ...); throws std::invalid_argument naming the
// type for values JSON cannot hold (undefined, functions).
std::string python_json_dumps(const Value& value, const JsonDumpOptions& options = {});

// Parses JSON text into values the way Python's json.loads does (key order kept, integers of
// any size exact); throws std::invalid_argument with the parser's message.
Value parse_json_value(std::string_view json_text);

}  // namespace dyncp::data::jinja
