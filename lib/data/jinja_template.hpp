#pragma once
// A Jinja interpreter for Hugging Face chat templates: parses a template once and renders it
// with the semantics of transformers' apply_chat_template (Jinja 3 in an
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, loop controls, the
// `generation` extension, `tojson` as json.dumps(ensure_ascii=False), raise_exception,
// strftime_now, namespace, dict).
//
// Supported: what jinja2 has in that environment (docs/data.md lists it): statements if, for
// (recursive loops, loop.*, `if` filter, else, break/continue), set, macro, call, filter,
// with, block, autoescape, raw, generation; Python's expression grammar; the str, list and dict
// methods, filters, tests and globals of jinja_methods.cpp, jinja_filters_*.cpp,
// jinja_tests.cpp and jinja_globals.cpp. include, import, from and extends (they need a template
// loader, which transformers' environment lacks), unknown statements, filters and tests are
// refused when the template is parsed, naming its line.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja_value.hpp"

namespace dyncp::data::jinja {

struct Program;

struct RenderedTemplate {
  std::string text;
  // Byte ranges of `text` produced inside {% generation %} blocks, in order (transformers'
  // generation indices, in bytes rather than characters).
  std::vector<std::pair<std::size_t, std::size_t>> generation_spans;
  // For every for-loop iteration whose item is a dict and whose output went straight to the
  // rendered text: the dict and the byte range written while the iteration ran.
  struct ItemSpan {
    const Dict* item = nullptr;
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  std::vector<ItemSpan> loop_item_spans;
};

class Template {
 public:
  // Throws a data error "<where>: chat template line N: ..." for syntax the interpreter does
  // not support.
  static Template parse(const std::string& source, const std::string& where);

  bool has_generation_blocks() const;

  // Renders with `variables` as the template's context. Errors (including the template's own
  // raise_exception) are data errors naming `where` and the template line.
  RenderedTemplate render(const Dict& variables, const std::string& where) const;

 private:
  std::shared_ptr<const Program> program_;
  std::string source_where_;
};

}  // namespace dyncp::data::jinja
