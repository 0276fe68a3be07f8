#pragma once
// The character reference tables of Python's html.unescape (generated into
// jinja_html_entities.cpp by tools/golden/data/make_html_entities.py). Internal to the
// interpreter's striptags filter.

#include <optional>
#include <string_view>

namespace dyncp::data::jinja {

// html.entities.html5[name] ("amp;", "amp", "NotEqualTilde;", ...) as UTF-8.
std::optional<std::string_view> html5_entity(std::string_view name);
// html's replacement for an invalid numeric reference (&#x80; is the euro sign, ...).
std::optional<std::string_view> invalid_charref(char32_t number);
// Code points html.unescape drops (controls, non-characters).
bool is_invalid_codepoint(char32_t number);

}  // namespace dyncp::data::jinja
