// Number filters: jinja2.filters' do_abs, do_int, do_float, do_round, do_filesizeformat.
#include <cmath>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

Value abs(const Value& v, const CallArguments&, int line) {
  if (v.kind() == Value::Kind::floating) return Value::floating(std::fabs(v.as_double()));
  if (v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean)
    return Value::integer(std::llabs(v.as_int()));
  fail(line, "bad operand type for abs(): '" + python_type_name(v) + "'");
}

Value int_filter(const Value& input, const CallArguments& arguments, int line) {
  const Value fallback = arguments.get(0, "default").value_or(Value::integer(0));
  switch (input.kind()) {
    case Value::Kind::integer:
    case Value::Kind::big_integer:
      return input;
    case Value::Kind::boolean:
      return Value::integer(input.as_int());
    case Value::Kind::floating:
      return std::isfinite(input.as_double())
                 ? Value::integer(static_cast<std::int64_t>(std::trunc(input.as_double())))
                 : fallback;
    case Value::Kind::string: {
      try {
        std::size_t used = 0;
        const std::string text = strip(input.text(), std::nullopt, true, true, line);
        const long long parsed = std::stoll(text, &used, 10);
        if (used == text.size()) return Value::integer(parsed);
        const double as_float = std::stod(text, &used);
        if (used == text.size()) return Value::integer(static_cast<std::int64_t>(as_float));
      } catch (const std::exception&) {
      }
      return fallback;
    }
    default:
      return fallback;
  }
}

Value float_filter(const Value& input, const CallArguments& arguments, int line) {
  (void)line;
  const Value fallback = arguments.get(0, "default").value_or(Value::floating(0.0));
  if (input.is_number()) return Value::floating(input.as_double());
  if (input.is_string()) {
    try {
      std::size_t used = 0;
      const double parsed = std::stod(input.text(), &used);
      if (used == input.text().size()) return Value::floating(parsed);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value round(const Value& v, const CallArguments& a, int line) {
  const std::int64_t precision =
      require_int(argument_or(a, 0, "precision", Value::integer(0)), "round()", line);
  const std::string method = python_str(argument_or(a, 1, "method", Value::string("common")));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  const double rounded = method == "ceil"    ? std::ceil(x)
                         : method == "floor" ? std::floor(x)
                                             : std::nearbyint(x);
  return Value::floating(rounded / scale);
}

}  // namespace

void register_number_filters(FilterTable& table) {
  table.add("abs", abs);
  table.add("int", int_filter);
  table.add("float", float_filter);
  table.add("round", round);
}

}  // namespace dyncp::data::jinja
