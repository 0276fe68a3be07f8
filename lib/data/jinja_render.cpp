// Evaluation of a parsed template (jinja_syntax.hpp). Scoping follows Jinja: every for-loop
// iteration, macro call and with block gets its own scope, `if` does not, `set` writes the
// innermost scope, and namespace objects are the one mutable thing a loop body can update for
// code after the loop.

#include <cmath>
#include <unordered_map>

#include "core/error.hpp"
#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_template.hpp"

namespace dyncp::data::jinja {

namespace {

// do_join under autoescape: with a Markup separator or item, Markup.join escapes the rest.
Value escaping_join(const Value& input, const CallArguments& arguments, int line) {
  const Value separator = argument_or(arguments, 0, "d", Value::string(""));
  const std::optional<Value> attribute = arguments.get(1, "attribute");
  ValueList items;
  bool any_markup = separator.is_markup();
  for (const Value& item : iterate(input, line)) {
    items.push_back(attribute ? attribute_path(item, python_str(*attribute), line) : item);
    any_markup = any_markup || items.back().is_markup();
  }
  const auto part = [&](const Value& v) {
    if (!any_markup) return python_str(v);
    return v.is_markup() ? v.text() : escape_html(python_str(v));
  };
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out += (i > 0 ? part(separator) : "") + part(items[i]);
  return any_markup ? Value::markup(std::move(out)) : Value::string(std::move(out));
}

// What jinja2's compiler folds to a constant: literals and operators and filters over them
// (never names or calls).
bool is_constant(const Expr& expr) {
  if (expr.kind == Expr::Kind::name || expr.kind == Expr::Kind::call) return false;
  for (const ExprPtr& child : expr.children) {
    if (child && !is_constant(*child)) return false;
  }
  for (const auto& keyword : expr.keywords) {
    if (!is_constant(*keyword.second)) return false;
  }
  return true;
}

class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}
  Value lookup(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_) {
      const auto found = scope->variables_.find(name);
      if (found != scope->variables_.end()) return found->second;
    }
    return Value::undefined_named(name);
  }
  void set(const std::string& name, Value value) { variables_[name] = std::move(value); }

 private:
  const Scope* parent_;
  std::unordered_map<std::string, Value> variables_;
};

enum class Flow { normal, break_loop, continue_loop };

bool is_int_like(const Value& v) {
  return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean;
}

void require_operands(const Value& a, const Value& b, const std::string& op, int line) {
  if (a.is_undefined()) throw_undefined(a, line);
  if (b.is_undefined()) throw_undefined(b, line);
  if (a.kind() == Value::Kind::big_integer || b.kind() == Value::Kind::big_integer)
    fail(line, "arithmetic on integers beyond 64 bits is not supported ('" + op + "')");
}

[[noreturn]] void unsupported_operands(const Value& a, const Value& b, const std::string& op,
                                       int line) {
  if (op == "+" && a.is_string())
    fail(line, "can only concatenate str (not \"" + python_type_name(b) + "\") to str");
  fail(line, "unsupported operand type(s) for " + op + ": '" + python_type_name(a) + "' and '" +
                 python_type_name(b) + "'");
}

// a op b in 64 bits; Python would switch to big integers, which templates never need.
template <typename Op>
Value checked(Op op, std::int64_t a, std::int64_t b, int line) {
  std::int64_t result = 0;
  if (op(a, b, &result)) fail(line, "integer overflow beyond 64 bits");
  return Value::integer(result);
}
bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
bool sub_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_sub_overflow(a, b, out);
}
bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

Value repeat(const Value& sequence, std::int64_t count) {
  if (sequence.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < count; ++i) out += sequence.text();
    return sequence.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  ValueList items;
  for (std::int64_t i = 0; i < count; ++i)
    items.insert(items.end(), sequence.items().begin(), sequence.items().end());
  return Value::list(std::move(items), sequence.is_tuple());
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::string(python_str(a) + python_str(b));
  require_operands(a, b, op, line);
  const bool numbers = a.is_number() && b.is_number();
  const bool integers = is_int_like(a) && is_int_like(b);
  if (op == "+") {
    if (integers) return checked(add_overflows, a.as_int(), b.as_int(), line);
    if (numbers) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      // Markup + str escapes the str (and str + Markup).
      if (a.is_markup() || b.is_markup()) {
        const auto part = [](const Value& v) {
          return v.is_markup() ? v.text() : escape_html(v.text());
        };
        return Value::markup(part(a) + part(b));
      }
      return Value::string(a.text() + b.text());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    unsupported_operands(a, b, op, line);
  }
  if (op == "-") {
    if (integers) return checked(sub_overflows, a.as_int(), b.as_int(), line);
    if (numbers) return Value::floating(a.as_double() - b.as_double());
    unsupported_operands(a, b, op, line);
  }
  if (op == "*") {
    if (integers) return checked(mul_overflows, a.as_int(), b.as_int(), line);
    if (numbers) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && is_int_like(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_int_like(a)) return repeat(b, a.as_int());
    unsupported_operands(a, b, op, line);
  }
  if (op == "%" && a.is_string()) {  // printf-style formatting
    const bool mapping = b.is_dict() && !b.dict_ptr()->is_namespace;
    const ValueList positional = b.is_list() && b.is_tuple() ? b.items()
                                 : mapping                   ? ValueList()
                                                             : ValueList{b};
    std::string text =
        percent_format(a.text(), positional, mapping ? &b : nullptr, a.is_markup(), line);
    return a.is_markup() ? Value::markup(std::move(text)) : Value::string(std::move(text));
  }
  if (!numbers) unsupported_operands(a, b, op, line);
  if (op == "/") {
    if (b.as_double() == 0.0) fail(line, "division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0.0) fail(line, "integer division or modulo by zero");
    if (integers) {
      const std::int64_t x = a.as_int();
      const std::int64_t y = b.as_int();
      std::int64_t quotient = x / y;
      std::int64_t remainder = x % y;
      if (remainder != 0 && ((remainder < 0) != (y < 0))) {  // Python floors
        --quotient;
        remainder += y;
      }
      return Value::integer(op == "//" ? quotient : remainder);
    }
    const double x = a.as_double();
    const double y = b.as_double();
    if (op == "//") return Value::floating(std::floor(x / y));
    double remainder = std::fmod(x, y);
    if (remainder != 0.0 && ((remainder < 0) != (y < 0))) remainder += y;
    return Value::floating(remainder);
  }
  if (op == "**") {
    if (integers && b.as_int() >= 0) {
      Value value = Value::integer(1);
      for (std::int64_t i = 0; i < b.as_int(); ++i)
        value = checked(mul_overflows, value.as_int(), a.as_int(), line);
      return value;
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  fail(line, "unknown operator " + op);
}

bool contains(const Value& container, const Value& needle, int line) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      if (!needle.is_string())
        fail(line,
             "'in <string>' requires string as left operand, not " + python_type_name(needle));
      return container.text().find(needle.text()) != std::string::npos;
    case Value::Kind::list:
      for (const Value& item : container.items()) {
        if (python_equal(item, needle)) return true;
      }
      return false;
    case Value::Kind::dict:
      if (container.dict_ptr()->is_namespace)
        fail(line, "argument of type 'Namespace' is not iterable");
      return needle.is_string() && container.dict_ptr()->find(needle.text()) != nullptr;
    default:
      fail(line, "argument of type '" + python_type_name(container) + "' is not iterable");
  }
}

bool compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return python_equal(a, b);
  if (op == "!=") return !python_equal(a, b);
  if (op == "in") return contains(b, a, line);
  if (op == "not in") return !contains(b, a, line);
  CallArguments arguments;
  arguments.positional.push_back(b);
  return apply_test(op, a, arguments, line);  // < > <= >= as the ordering tests
}

class Renderer {
 public:
  Renderer(const Program& program, const Dict& variables, RenderedTemplate& result)
      : result_(result), globals_(nullptr), root_(&globals_) {
    Dict builtins;
    add_globals(builtins);
    for (auto& [name, value] : builtins.entries) globals_.set(name, value);
    // self.name() renders a block again.
    auto self = std::make_shared<Dict>();
    for (const Node* block : program.blocks) {
      self->set(block->text, Value::callable(
                                 [this, block](CallArguments&) {
                                   Scope inner(&root_);
                                   return Value::string(capture(block->body, inner));
                                 },
                                 block->text));
    }
    globals_.set("self", Value::dict(std::move(self)));
    for (const auto& [name, value] : variables.entries) root_.set(name, value);
    out_ = &result_.text;
  }

  void run(const Body& body) {
    if (exec(body, root_) != Flow::normal) fail(0, "break or continue outside a loop");
  }

 private:
  bool at_top() const { return out_ == &result_.text; }

  // Renders `body` into a string instead of the output (macros, set blocks, filter blocks).
  std::string capture(const Body& body, Scope& scope) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
      if (exec(body, scope) != Flow::normal) fail(0, "break or continue outside a loop");
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buffer;
  }

  Flow exec(const Body& body, Scope& scope) {
    for (const NodePtr& node : body) {
      const Flow flow = exec(*node, scope);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow exec(const Node& node, Scope& scope) {
    switch (node.kind) {
      case Node::Kind::text:
        *out_ += node.text;
        return Flow::normal;
      case Node::Kind::output: {
        const Value value = eval(*node.expr, scope);
        // Under a non-constant autoescape expression jinja2 prints constants unescaped (it
        // folds them at compile time, when the setting is not known).
        const bool escape =
            autoescape_ && !value.is_markup() && !(autoescape_volatile_ && is_constant(*node.expr));
        *out_ += escape ? escape_html(python_str(value)) : python_str(value);
        return Flow::normal;
      }
      case Node::Kind::block: {
        // A block sees the template's top-level names, and the enclosing scope when scoped.
        Scope inner(node.scoped ? &scope : &root_);
        return exec(node.body, inner);
      }
      case Node::Kind::autoescape: {
        const bool saved = autoescape_;
        const bool saved_volatile = autoescape_volatile_;
        autoescape_ = eval(*node.expr, scope).truthy();
        autoescape_volatile_ = !is_constant(*node.expr);
        const Flow flow = exec(node.body, scope);
        autoescape_ = saved;
        autoescape_volatile_ = saved_volatile;
        return flow;
      }
      case Node::Kind::if_block:
        for (const auto& [condition, branch] : node.branches) {
          if (eval(*condition, scope).truthy()) return exec(branch, scope);
        }
        return exec(node.else_body, scope);
      case Node::Kind::for_loop:
        return exec_for(node, scope);
      case Node::Kind::set:
        exec_set(node, scope);
        return Flow::normal;
      case Node::Kind::set_block: {
        Value text = Value::string(capture(node.body, scope));
        if (node.filter) text = apply_filter_chain(*node.filter, text, scope);
        scope.set(node.targets[0], std::move(text));
        return Flow::normal;
      }
      case Node::Kind::macro:
        scope.set(node.text, make_macro(node, nullptr, nullptr));
        return Flow::normal;
      case Node::Kind::call_block: {
        const Value caller = make_macro(node, &scope, "caller");
        const Expr& call = *node.expr;
        Value callee = eval(*call.children[0], scope);
        CallArguments arguments = evaluate_arguments(call, 1, scope);
        arguments.keyword.emplace_back("caller", caller);
        *out_ += python_str(invoke(callee, arguments, call.line));
        return Flow::normal;
      }
      case Node::Kind::filter_block: {
        const Value text = Value::string(capture(node.body, scope));
        *out_ += python_str(apply_filter_chain(*node.filter, text, scope));
        return Flow::normal;
      }
      case Node::Kind::with_block: {
        Scope inner(&scope);
        for (std::size_t i = 0; i < node.targets.size(); ++i)
          inner.set(node.targets[i], eval(*node.defaults[i], scope));
        return exec(node.body, inner);
      }
      case Node::Kind::generation: {
        const bool top = at_top();
        const std::size_t begin = out_->size();
        const Flow flow = exec(node.body, scope);
        const std::size_t length = out_->size() - begin;
        // transformers records the block at the top-level output length when it finishes.
        const std::size_t start = top ? begin : result_.text.size();
        result_.generation_spans.emplace_back(start, start + length);
        return flow;
      }
      case Node::Kind::loop_break:
        return Flow::break_loop;
      case Node::Kind::loop_continue:
        return Flow::continue_loop;
    }
    return Flow::normal;
  }

  void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& value,
                    int line) {
    if (targets.size() == 1) {
      scope.set(targets[0], value);
      return;
    }
    const ValueList parts = iterate(value, line);
    if (parts.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
  }

  Flow exec_for(const Node& node, Scope& scope) {
    return run_loop(node, scope, eval(*node.expr, scope), 0);
  }

  // One (possibly recursive) run of a for loop over `iterable`; `loop(items)` in a recursive
  // loop's body runs it again one level deeper and returns what that wrote.
  Flow run_loop(const Node& node, Scope& scope, const Value& iterable, std::int64_t depth0) {
    if (iterable.is_none()) fail(node.line, "'NoneType' object is not iterable");
    ValueList items = iterate(iterable, node.line);
    if (node.condition) {
      ValueList kept;
      for (const Value& item : items) {
        Scope probe(&scope);
        bind_targets(probe, node.targets, item, node.line);
        if (eval(*node.condition, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(node.else_body, scope);
    const std::int64_t length = static_cast<std::int64_t>(items.size());
    auto changed_last = std::make_shared<std::optional<ValueList>>();
    for (std::int64_t i = 0; i < length; ++i) {
      const Value& item = items[static_cast<std::size_t>(i)];
      Scope iteration(&scope);
      bind_targets(iteration, node.targets, item, node.line);
      auto loop = std::make_shared<Dict>();
      loop->set("index", Value::integer(i + 1));
      loop->set("index0", Value::integer(i));
      loop->set("revindex", Value::integer(length - i));
      loop->set("revindex0", Value::integer(length - i - 1));
      loop->set("first", Value::boolean(i == 0));
      loop->set("last", Value::boolean(i == length - 1));
      loop->set("length", Value::integer(length));
      loop->set("depth", Value::integer(depth0 + 1));
      loop->set("depth0", Value::integer(depth0));
      loop->set("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)]
                                  : Value::undefined_named("there is no previous item"));
      loop->set("nextitem", i + 1 < length ? items[static_cast<std::size_t>(i + 1)]
                                           : Value::undefined_named("there is no next item"));
      loop->set("cycle",
                Value::callable(
                    [i](CallArguments& a) {
                      if (a.positional.empty())
                        throw TemplateError(0, "loop.cycle() needs arguments");
                      return a.positional[static_cast<std::size_t>(i) % a.positional.size()];
                    },
                    "cycle"));
      // loop.changed(*values): true when the values differ from the previous call's.
      loop->set("changed", Value::callable(
                               [changed_last](CallArguments& a) {
                                 const ValueList& now = a.positional;
                                 const bool same =
                                     changed_last->has_value() &&
                                     python_equal(Value::list(**changed_last), Value::list(now));
                                 *changed_last = now;
                                 return Value::boolean(!same);
                               },
                               "changed"));
      if (node.recursive) {
        Scope* defining = &scope;
        loop->call = [this, &node, defining, depth0](CallArguments& a) {
          if (a.positional.size() != 1 || !a.keyword.empty())
            throw TemplateError(0, "loop() takes exactly one iterable");
          std::string buffer;
          std::string* saved = out_;
          out_ = &buffer;
          try {
            run_loop(node, *defining, a.positional[0], depth0 + 1);
          } catch (...) {
            out_ = saved;
            throw;
          }
          out_ = saved;
          return Value::string(std::move(buffer));
        };
      }
      iteration.set("loop", Value::dict(loop));
      const bool track = at_top() && item.is_dict();
      const std::size_t begin = out_->size();
      const Flow flow = exec(node.body, iteration);
      if (track) result_.loop_item_spans.push_back({item.dict_ptr().get(), begin, out_->size()});
      if (flow == Flow::break_loop) break;
    }
    return Flow::normal;
  }

  void exec_set(const Node& node, Scope& scope) {
    Value value = eval(*node.expr, scope);
    if (!node.text.empty()) {  // {% set ns.attribute = value %}
      const Value target = scope.lookup(node.targets[0]);
      if (!target.is_dict() || !target.dict_ptr()->is_namespace)
        fail(node.line,
             "cannot assign attribute on non-namespace object '" + node.targets[0] + "'");
      if (node.text.starts_with("_"))
        fail(node.line,
             "Chat templates cannot store underscore-prefixed attributes on a "
             "namespace, but got '" +
                 node.text + "'");
      target.dict_ptr()->set(node.text, std::move(value));
      return;
    }
    bind_targets(scope, node.targets, value, node.line);
  }

  // A macro (or a call block's caller) as a callable object with jinja2's Macro attributes;
  // `parent` is the defining scope for callers, the template's root scope for macros.
  Value make_macro(const Node& node, Scope* parent, const char* name) {
    Scope* defining = parent != nullptr ? parent : &root_;
    const std::string macro_name = name != nullptr ? name : node.text;
    auto object = std::make_shared<Dict>();
    // The body renders with the autoescape setting where the macro was defined; the result is
    // Markup when the call site autoescapes (jinja2's Macro takes the caller's eval context).
    const bool defined_escaping = autoescape_;
    object->call = [this, &node, defining, macro_name, defined_escaping](CallArguments& arguments) {
      const std::size_t declared = node.targets.size();
      if (arguments.positional.size() > declared && !node.catch_varargs)
        fail(node.line, "macro '" + macro_name + "' takes not more than " +
                            std::to_string(declared) + " argument(s)");
      Scope scope(defining);
      auto extra_keywords = std::make_shared<Dict>();
      std::vector<bool> given(declared, false);
      for (std::size_t i = 0; i < declared && i < arguments.positional.size(); ++i) {
        scope.set(node.targets[i], arguments.positional[i]);
        given[i] = true;
      }
      for (const auto& [key, value] : arguments.keyword) {
        const auto found = std::find(node.targets.begin(), node.targets.end(), key);
        if (found != node.targets.end()) {
          scope.set(key, value);
          given[static_cast<std::size_t>(found - node.targets.begin())] = true;
        } else if (key == "caller") {
          scope.set(key, value);
        } else if (node.catch_kwargs) {
          extra_keywords->set(key, value);
        } else {
          fail(node.line, "macro '" + macro_name + "' takes no keyword argument '" + key + "'");
        }
      }
      for (std::size_t i = 0; i < declared; ++i) {
        if (given[i]) continue;
        scope.set(node.targets[i], node.defaults[i] ? eval(*node.defaults[i], scope)
                                                    : Value::undefined_named(node.targets[i]));
      }
      if (node.catch_varargs) {
        ValueList rest;
        for (std::size_t i = declared; i < arguments.positional.size(); ++i)
          rest.push_back(arguments.positional[i]);
        scope.set("varargs", Value::list(std::move(rest), true));
      }
      if (node.catch_kwargs) scope.set("kwargs", Value::dict(extra_keywords));
      const bool calling_escaping = autoescape_;
      autoescape_ = defined_escaping;
      std::string text;
      try {
        text = capture(node.body, scope);
      } catch (...) {
        autoescape_ = calling_escaping;
        throw;
      }
      autoescape_ = calling_escaping;
      return calling_escaping ? Value::markup(std::move(text)) : Value::string(std::move(text));
    };
    ValueList arguments;
    for (const std::string& target : node.targets) arguments.push_back(Value::string(target));
    object->set("name", Value::string(macro_name));
    object->set("arguments", Value::list(std::move(arguments), true));
    object->set("catch_varargs", Value::boolean(node.catch_varargs));
    object->set("catch_kwargs", Value::boolean(node.catch_kwargs));
    return Value::dict(std::move(object));
  }

  CallArguments evaluate_arguments(const Expr& expr, std::size_t first, Scope& scope) {
    CallArguments arguments;
    for (std::size_t i = first; i < expr.children.size(); ++i)
      arguments.positional.push_back(eval(*expr.children[i], scope));
    for (const auto& [key, value] : expr.keywords)
      arguments.keyword.emplace_back(key, eval(*value, scope));
    return arguments;
  }

  // Nested macro calls and recursive loop levels. jinja2 in transformers meets Python's
  // recursion limit between 150 and 200 nested macro calls and between 100 and 200 recursive
  // loop levels (measured with jinja2 3.1.6); deeper than 100 is refused here, which also keeps
  // the C++ stack safe on any worker thread.
  static constexpr int max_call_depth = 100;

  struct DepthGuard {
    explicit DepthGuard(int& depth, int line) : depth_(depth) {
      if (++depth_ > max_call_depth) {
        --depth_;
        fail(line, "the template nests more than " + std::to_string(max_call_depth) +
                       " macro calls or recursive loop levels");
      }
    }
    ~DepthGuard() { --depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    int& depth_;
  };

  Value invoke(const Value& callee, CallArguments& arguments, int line) {
    const DepthGuard guard(call_depth_, line);
    if (callee.is_dict() && callee.dict_ptr()->call) {
      try {
        return callee.dict_ptr()->call(arguments);
      } catch (TemplateError& error) {
        if (error.line == 0) error.line = line;
        throw;
      }
    }
    if (callee.kind() != Value::Kind::callable) {
      if (callee.is_undefined()) throw_undefined(callee, line);
      fail(line, "'" + python_type_name(callee) + "' object is not callable");
    }
    try {
      return callee.function()(arguments);
    } catch (TemplateError& error) {
      if (error.line == 0) error.line = line;
      throw;
    }
  }

  // Applies a filter chain parsed with a null innermost input to `input`.
  Value apply_filter_chain(const Expr& filter, const Value& input, Scope& scope) {
    const Value inner =
        filter.children[0] ? apply_filter_chain(*filter.children[0], input, scope) : input;
    const CallArguments arguments = evaluate_arguments(filter, 1, scope);
    return filter_value(filter.name, inner, arguments, filter.line);
  }

  // join is jinja2's one builtin filter that reads the autoescape setting.
  Value filter_value(const std::string& name, const Value& input, const CallArguments& arguments,
                     int line) {
    if (autoescape_ && name == "join") return escaping_join(input, arguments, line);
    return apply_filter(name, input, arguments, line);
  }

  Value eval(const Expr& expr, Scope& scope) {
    switch (expr.kind) {
      case Expr::Kind::literal:
        return expr.value;
      case Expr::Kind::name:
        return scope.lookup(expr.name);
      case Expr::Kind::attribute:
        return get_attribute(eval(*expr.children[0], scope), expr.name, expr.line);
      case Expr::Kind::item:
        return get_item(eval(*expr.children[0], scope), eval(*expr.children[1], scope), expr.line);
      case Expr::Kind::slice: {
        const auto part = [&](std::size_t i) {
          return expr.children[i] ? eval(*expr.children[i], scope) : Value::none();
        };
        return get_slice(eval(*expr.children[0], scope), part(1), part(2), part(3), expr.line);
      }
      case Expr::Kind::call: {
        const Value callee = eval(*expr.children[0], scope);
        CallArguments arguments = evaluate_arguments(expr, 1, scope);
        return invoke(callee, arguments, expr.line);
      }
      case Expr::Kind::filter: {
        const Value input = eval(*expr.children[0], scope);
        const CallArguments arguments = evaluate_arguments(expr, 1, scope);
        return filter_value(expr.name, input, arguments, expr.line);
      }
      case Expr::Kind::test: {
        const Value input = eval(*expr.children[0], scope);
        const CallArguments arguments = evaluate_arguments(expr, 1, scope);
        return Value::boolean(apply_test(expr.name, input, arguments, expr.line) != expr.negated);
      }
      case Expr::Kind::negate:
      case Expr::Kind::unary_plus: {
        const Value operand = eval(*expr.children[0], scope);
        if (operand.is_undefined()) throw_undefined(operand, expr.line);
        if (!operand.is_number() || operand.kind() == Value::Kind::big_integer)
          fail(expr.line, "bad operand type for unary -: '" + python_type_name(operand) + "'");
        if (expr.kind == Expr::Kind::unary_plus) return operand;
        if (operand.kind() == Value::Kind::floating) return Value::floating(-operand.as_double());
        return Value::integer(-operand.as_int());
      }
      case Expr::Kind::logical_not:
        return Value::boolean(!eval(*expr.children[0], scope).truthy());
      case Expr::Kind::binary: {
        Value left = eval(*expr.children[0], scope);
        Value right = eval(*expr.children[1], scope);
        // In an autoescape block `~` is markup_join: with a Markup operand, the others escaped.
        // jinja2 folds constant operands at compile time with str(), which drops Markup.
        if (autoescape_ && expr.name == "~" && (left.is_markup() || right.is_markup()) &&
            !(is_constant(*expr.children[0]) && is_constant(*expr.children[1]))) {
          const auto part = [](const Value& v) {
            return v.is_markup() ? v.text() : escape_html(python_str(v));
          };
          return Value::markup(part(left) + part(right));
        }
        return arithmetic(expr.name, left, right, expr.line);
      }
      case Expr::Kind::compare: {
        Value left = eval(*expr.children[0], scope);
        for (std::size_t i = 0; i < expr.ops.size(); ++i) {
          Value right = eval(*expr.children[i + 1], scope);
          if (!compare(expr.ops[i], left, right, expr.line)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::logical_and: {
        Value left = eval(*expr.children[0], scope);
        return left.truthy() ? eval(*expr.children[1], scope) : left;
      }
      case Expr::Kind::logical_or: {
        Value left = eval(*expr.children[0], scope);
        return left.truthy() ? left : eval(*expr.children[1], scope);
      }
      case Expr::Kind::conditional:
        if (eval(*expr.children[0], scope).truthy()) return eval(*expr.children[1], scope);
        return expr.children[2] ? eval(*expr.children[2], scope)
                                : Value::undefined_named("the else branch of a conditional");
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        ValueList items;
        for (const ExprPtr& child : expr.children) items.push_back(eval(*child, scope));
        return Value::list(std::move(items), expr.kind == Expr::Kind::tuple);
      }
      case Expr::Kind::dict: {
        auto dict = std::make_shared<Dict>();
        for (std::size_t i = 0; i + 1 < expr.children.size(); i += 2) {
          const Value key = eval(*expr.children[i], scope);
          if (!key.is_string()) fail(expr.line, "dict literals need string keys");
          dict->set(key.text(), eval(*expr.children[i + 1], scope));
        }
        return Value::dict(std::move(dict));
      }
    }
    fail(expr.line, "unknown expression");
  }

  RenderedTemplate& result_;
  Scope globals_;
  Scope root_;
  std::string* out_ = nullptr;
  bool autoescape_ = false;
  bool autoescape_volatile_ = false;
  int call_depth_ = 0;
};

// Refuses filters and tests the interpreter lacks when the template is parsed, as Jinja does.
void check_names(const Expr* expr) {
  if (expr == nullptr) return;
  if (expr->kind == Expr::Kind::filter && !is_known_filter(expr->name))
    throw TemplateError(expr->line, "unsupported filter '" + expr->name + "'");
  if (expr->kind == Expr::Kind::test && !is_known_test(expr->name))
    throw TemplateError(expr->line, "unsupported test '" + expr->name + "'");
  for (const ExprPtr& child : expr->children) check_names(child.get());
  for (const auto& keyword : expr->keywords) check_names(keyword.second.get());
}

void check_names(const Body& body) {
  for (const NodePtr& node : body) {
    check_names(node->expr.get());
    check_names(node->condition.get());
    check_names(node->filter.get());
    for (const ExprPtr& value : node->defaults) check_names(value.get());
    for (const auto& [condition, branch] : node->branches) {
      check_names(condition.get());
      check_names(branch);
    }
    check_names(node->body);
    check_names(node->else_body);
  }
}

std::string at_line(const std::string& where, int line) {
  return where + ": chat template line " + std::to_string(line);
}

}  // namespace

Template Template::parse(const std::string& source, const std::string& where) {
  Template result;
  result.source_where_ = where;
  try {
    std::unique_ptr<Program> program = parse_program(source);
    check_names(program->body);
    result.program_ = std::move(program);
  } catch (const TemplateError& error) {
    core::throw_data_error(at_line(where, error.line), error.what());
  }
  return result;
}

bool Template::has_generation_blocks() const {
  return program_->has_generation_blocks;
}

RenderedTemplate Template::render(const Dict& variables, const std::string& where) const {
  RenderedTemplate result;
  Renderer renderer(*program_, variables, result);
  try {
    renderer.run(program_->body);
  } catch (const TemplateError& error) {
    if (error.raised_by_template) {
      core::throw_data_error(where,
                             "the chat template (" + source_where_ +
                                 ") refused this conversation: " + std::string(error.what()) +
                                 " (raise_exception at line " + std::to_string(error.line) + ")");
    }
    core::throw_data_error(where, "rendering the chat template failed at " +
                                      at_line(source_where_, error.line) + ": " + error.what());
  }
  return result;
}

}  // namespace dyncp::data::jinja
