#pragma once
// Syntax tree of a Jinja template, as jinja_parser.cpp builds it and jinja_render.cpp walks it.
// Internal to the interpreter; the public interface is jinja_template.hpp.

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja_value.hpp"

namespace dyncp::data::jinja {

// A syntax or evaluation error at a template line; jinja_template.cpp turns it into a data error.
class TemplateError : public std::runtime_error {
 public:
  TemplateError(int line, const std::string& message, bool raised_by_template = false)
      : std::runtime_error(message), line(line), raised_by_template(raised_by_template) {}
  int line;
  bool raised_by_template;  // raise_exception(...) in the template, not a fault of the template
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    attribute,    // children[0].name
    item,         // children[0][children[1]]
    slice,        // children[0][children[1]:children[2]:children[3]] (missing parts null)
    call,         // children[0](children[1..], keywords)
    filter,       // children[0] | name(children[1..], keywords); children[0] null in filter blocks
    test,         // children[0] is [not] name(children[1..])
    negate,       // -children[0]
    unary_plus,   // +children[0]
    logical_not,  // not children[0]
    binary,       // children[0] name children[1]: + - * / // % ** ~ in "not in"
    compare,      // children[0] ops[0] children[1] ops[1] children[2] ...
    logical_and,
    logical_or,
    conditional,  // children[1] if children[0] else children[2] (null: undefined)
    list,
    tuple,
    dict,  // children: key, value, key, value, ...
  };
  Kind kind = Kind::literal;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    text,          // text
    output,        // {{ expr }}
    if_block,      // branches (condition, body), else_body
    for_loop,      // targets in expr [if condition]: body {% else %} else_body
    set,           // targets (or targets[0].attribute) = expr
    set_block,     // {% set targets[0] | filter %} body {% endset %}
    macro,         // {% macro name(targets = defaults) %} body
    call_block,    // {% call(targets) expr %} body
    filter_block,  // {% filter filter %} body
    with_block,    // {% with targets = defaults %} body
    generation,    // {% generation %} body (transformers' assistant-mask extension)
    block,         // {% block text [scoped] %} body: rendered in place
    autoescape,    // {% autoescape expr %} body
    loop_break,
    loop_continue,
  };
  Kind kind = Kind::text;
  int line = 0;
  std::string text;   // text; macro name; set attribute (ns.attribute)
  ExprPtr expr;       // output / for iterable / set value / call-block call
  ExprPtr condition;  // for-loop filter
  ExprPtr filter;     // set-block and filter-block filter chain (innermost child null)
  std::vector<std::string> targets;
  std::vector<ExprPtr> defaults;  // macro defaults / with values, parallel to targets
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  bool recursive = false;      // for ... recursive: loop(items) renders the body again
  bool scoped = false;         // block scoped: the block sees the enclosing scope
  bool catch_varargs = false;  // a macro whose body reads `varargs` takes extra positionals
  bool catch_kwargs = false;   // ... and `kwargs` extra keywords
};

struct Program {
  Body body;
  bool has_generation_blocks = false;
  // Every {% block %} by name (rendered in place, and callable as self.name()).
  std::vector<const Node*> blocks;
};

// Parses a template with the options transformers compiles chat templates with: trim_blocks,
// lstrip_blocks, no trailing newline kept. Throws TemplateError naming the line.
std::unique_ptr<Program> parse_program(const std::string& source);

}  // namespace dyncp::data::jinja
