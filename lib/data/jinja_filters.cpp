// The filter table: every kind of filter registers itself (jinja_filters_*.cpp), and a filter
// unknown here is refused when the template is parsed.
#include <algorithm>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"

namespace dyncp::data::jinja {

namespace {

const FilterTable& filters() {
  static const FilterTable table = [] {
    FilterTable t;
    register_text_filters(t);
    register_sequence_filters(t);
    register_number_filters(t);
    register_output_filters(t);
    register_urlize_filter(t);
    return t;
  }();
  return table;
}

}  // namespace

void FilterTable::add(const std::string& name, FilterFunction function, OnUndefined on_undefined) {
  entries_[name] = Entry{function, on_undefined};
}

const FilterTable::Entry* FilterTable::find(std::string_view name) const {
  const auto found = entries_.find(name);
  return found == entries_.end() ? nullptr : &found->second;
}

bool is_known_filter(std::string_view name) {
  return filters().find(name) != nullptr;
}

Value apply_filter(const std::string& name, const Value& input, const CallArguments& arguments,
                   int line) {
  const FilterTable::Entry* entry = filters().find(name);
  if (entry == nullptr) fail(line, "no filter named '" + name + "'");
  if (input.is_undefined() && entry->on_undefined == OnUndefined::raise)
    throw_undefined(input, line);
  return entry->function(input, arguments, line);
}

}  // namespace dyncp::data::jinja
