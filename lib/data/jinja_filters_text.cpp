// String filters: jinja2.filters' do_trim, do_lower, do_upper, do_title, do_capitalize,
// do_replace, do_indent, do_wordcount, do_center, do_truncate, do_wordwrap, do_format,
// do_striptags.
#include <algorithm>
#include <cctype>
#include <memory>

#include "data/jinja_builtins.hpp"
#include "data/jinja_html_entities.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"
#include "data/utf8.hpp"

namespace dyncp::data::jinja {

namespace {

std::vector<std::u32string> split_lines(const std::u32string& text);

// These call str methods on soft_str(value), so a Markup input gives a Markup.
Value like(const Value& input, std::string text) {
  return input.is_markup() ? Value::markup(std::move(text)) : Value::string(std::move(text));
}

Value trim(const Value& v, const CallArguments& a, int line) {
  return like(v, strip(python_str(v), a.get(0, "chars"), true, true, line));
}

Value lower(const Value& v, const CallArguments&, int) {
  return like(v, map_case(python_str(v), false));
}

Value upper(const Value& v, const CallArguments&, int) {
  return like(v, map_case(python_str(v), true));
}

// jinja2's do_title is not str.title: it splits at runs of "-", whitespace, "(", "{", "[", "<"
// and upper-cases each piece's first character, lower-casing the rest ("o'neil" -> "O'neil").
Value title(const Value& v, const CallArguments&, int) {
  const std::u32string text = decode(python_str(v));
  const auto splits = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
  };
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t j = i;
    const bool separator = splits(text[i]);
    while (j < text.size() && splits(text[j]) == separator) ++j;
    const std::string piece = encode(std::u32string_view(text).substr(i, j - i));
    if (separator) {
      out += piece;
    } else {
      std::size_t offset = 0;
      next_code_point(piece, offset);
      out += map_case(piece.substr(0, offset), true) + map_case(piece.substr(offset), false);
    }
    i = j;
  }
  return like(v, std::move(out));
}

Value capitalize_filter(const Value& v, const CallArguments&, int) {
  return like(v, capitalize(python_str(v)));
}

Value replace(const Value& v, const CallArguments& a, int line) {
  const std::optional<Value> old_text = a.get(0, "old");
  const std::optional<Value> new_text = a.get(1, "new");
  if (!old_text || !new_text) fail(line, "replace needs old and new");
  const std::optional<Value> count = a.get(2, "count");
  return Value::string(
      replace_all(python_str(v), python_str(*old_text), python_str(*new_text),
                  count && !count->is_none() ? require_int(*count, "replace()", line) : -1));
}

// jinja2's do_indent: lines split as str.splitlines does, rejoined with "\n".
Value indent(const Value& input, const CallArguments& arguments, int line) {
  const std::optional<Value> width = arguments.get(0, "width");
  std::string indentation = "    ";
  if (width) {
    indentation =
        width->is_string()
            ? width->text()
            : std::string(static_cast<std::size_t>(require_int(*width, "indent()", line)), ' ');
  }
  const bool first = argument_or(arguments, 1, "first", Value::boolean(false)).truthy();
  const bool blank = argument_or(arguments, 2, "blank", Value::boolean(false)).truthy();
  // The quirk jinja2 needs for splitlines: a newline appended first.
  const std::vector<std::u32string> lines = split_lines(decode(python_str(input) + "\n"));
  std::string out = encode(lines.front());
  for (std::size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += indentation;
    out += encode(lines[i]);
  }
  if (first) out = indentation + out;
  return like(input, std::move(out));
}

// len(re.findall(r"\w+", text)).
Value wordcount(const Value& v, const CallArguments&, int) {
  std::int64_t words = 0;
  bool in_word = false;
  for (const char32_t c : decode(python_str(v))) {
    const bool word = is_letter(c) || is_decimal_digit(c) || c == '_';
    words += word && !in_word ? 1 : 0;
    in_word = word;
  }
  return Value::integer(words);
}

Value center(const Value& v, const CallArguments& a, int line) {
  const std::u32string text = decode(python_str(v));
  const std::int64_t width =
      require_int(argument_or(a, 0, "width", Value::integer(80)), "center()", line);
  const std::int64_t margin = width - static_cast<std::int64_t>(text.size());
  if (margin <= 0) return like(v, encode(text));
  // CPython's str.center: the odd space goes left when the width is odd.
  const std::int64_t left = margin / 2 + (margin & width & 1);
  return like(v, std::string(static_cast<std::size_t>(left), ' ') + encode(text) +
                     std::string(static_cast<std::size_t>(margin - left), ' '));
}

Value truncate(const Value& v, const CallArguments& a, int line) {
  const std::u32string text = decode(python_str(v));
  const std::int64_t length =
      require_int(argument_or(a, 0, "length", Value::integer(255)), "truncate()", line);
  const bool killwords = argument_or(a, 1, "killwords", Value::boolean(false)).truthy();
  const std::u32string end = decode(python_str(argument_or(a, 2, "end", Value::string("..."))));
  const Value leeway_value = argument_or(a, 3, "leeway", Value::none());
  // jinja2's policy truncate.leeway is 5.
  const std::int64_t leeway =
      leeway_value.is_none() ? 5 : require_int(leeway_value, "truncate(leeway)", line);
  const auto end_size = static_cast<std::int64_t>(end.size());
  if (length < end_size)
    fail(line,
         "expected length >= " + std::to_string(end_size) + ", got " + std::to_string(length));
  if (leeway < 0) fail(line, "expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<std::int64_t>(text.size()) <= length + leeway) return like(v, encode(text));
  std::u32string kept = text.substr(0, static_cast<std::size_t>(length - end_size));
  if (!killwords) {
    const std::size_t space = kept.rfind(U' ');
    if (space != std::u32string::npos) kept.resize(space);
  }
  // Markup + end escapes the end.
  if (v.is_markup()) return Value::markup(encode(kept) + escape_html(encode(end)));
  return Value::string(encode(kept + end));
}

// Python's str.splitlines() boundaries.
bool is_line_boundary(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::u32string> split_lines(const std::u32string& text) {
  std::vector<std::u32string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!is_line_boundary(text[i])) continue;
    lines.push_back(text.substr(start, i - start));
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// textwrap's whitespace (ASCII only) and its wordsep_re character classes.
bool is_wrap_space(char32_t c) {
  return c == '\t' || c == '\n' || c == 0x0b || c == 0x0c || c == '\r' || c == ' ';
}
bool is_word_char(char32_t c) {
  return is_letter(c) || is_decimal_digit(c) || c == '_';
}
bool is_wrap_letter(char32_t c) {
  return is_letter(c) || c == '_';
}
bool is_word_punct(char32_t c) {
  return is_word_char(c) || c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' ||
         c == '?';
}

// textwrap.TextWrapper._split: whitespace runs, and words cut after hyphens between letters
// (wordsep_re when break_on_hyphens, else whitespace alone).
std::vector<std::u32string> wrap_chunks(const std::u32string& s, bool break_on_hyphens) {
  std::vector<std::u32string> chunks;
  const std::size_t n = s.size();
  const auto at = [&](std::size_t i, bool (*test)(char32_t)) { return i < n && test(s[i]); };
  const auto hyphens_then_word = [&](std::size_t i) {  // -{2,}\w at i
    std::size_t j = i;
    while (j < n && s[j] == '-') ++j;
    return j - i >= 2 && at(j, is_word_char);
  };
  std::size_t p = 0;
  while (p < n) {
    std::size_t q = p;
    if (is_wrap_space(s[p])) {
      while (q < n && is_wrap_space(s[q])) ++q;
    } else if (break_on_hyphens && p > 0 && is_word_punct(s[p - 1]) && hyphens_then_word(p)) {
      while (q < n && s[q] == '-') ++q;  // an em-dash between words
    } else if (!break_on_hyphens) {
      while (q < n && !is_wrap_space(s[q])) ++q;
    } else {
      for (q = p + 1;; ++q) {
        if (q >= n || is_wrap_space(s[q])) break;
        if (s[q] == '-') {
          const bool before =
              (q >= 2 && at(q - 2, is_wrap_letter) && at(q - 1, is_wrap_letter)) ||
              (q >= 3 && at(q - 3, is_wrap_letter) && s[q - 2] == '-' && at(q - 1, is_wrap_letter));
          const bool after = at(q + 1, is_wrap_letter) &&
                             (at(q + 2, is_wrap_letter) ||
                              (q + 2 < n && s[q + 2] == '-' && at(q + 3, is_wrap_letter)));
          if (before && after) {
            ++q;  // a hyphenated word breaks after its hyphen
            break;
          }
        }
        if (is_word_punct(s[q - 1]) && hyphens_then_word(q)) break;
      }
    }
    chunks.push_back(s.substr(p, q - p));
    p = q;
  }
  return chunks;
}

bool is_blank(const std::u32string& chunk) {
  return std::all_of(chunk.begin(), chunk.end(), is_python_space);
}

// textwrap.TextWrapper._wrap_chunks with drop_whitespace and no indents.
std::vector<std::u32string> wrap_line(const std::u32string& text, std::size_t width,
                                      bool break_long_words, bool break_on_hyphens) {
  std::vector<std::u32string> chunks = wrap_chunks(text, break_on_hyphens);
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::u32string> lines;
  while (!chunks.empty()) {
    std::vector<std::u32string> current;
    std::size_t length = 0;
    if (is_blank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && length + chunks.back().size() <= width) {
      length += chunks.back().size();
      current.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && chunks.back().size() > width) {  // _handle_long_word
      const std::size_t space_left = width < 1 ? 1 : width - length;
      if (break_long_words) {
        std::u32string& chunk = chunks.back();
        std::size_t end = space_left;
        if (break_on_hyphens && chunk.size() > space_left) {
          const std::size_t hyphen =
              space_left == 0 ? std::u32string::npos : chunk.rfind(U'-', space_left - 1);
          if (hyphen != std::u32string::npos && hyphen > 0 &&
              std::any_of(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(hyphen),
                          [](char32_t c) { return c != '-'; }))
            end = hyphen + 1;
        }
        current.push_back(chunk.substr(0, end));
        chunk = chunk.substr(end);
      } else if (current.empty()) {
        current.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!current.empty() && is_blank(current.back())) current.pop_back();
    if (!current.empty()) {
      std::u32string joined;
      for (const std::u32string& piece : current) joined += piece;
      lines.push_back(std::move(joined));
    }
  }
  return lines;
}

Value wordwrap(const Value& v, const CallArguments& a, int line) {
  const std::int64_t width =
      require_int(argument_or(a, 0, "width", Value::integer(79)), "wordwrap()", line);
  if (width <= 0) fail(line, "invalid width " + std::to_string(width) + " (must be > 0)");
  const bool break_long_words =
      argument_or(a, 1, "break_long_words", Value::boolean(true)).truthy();
  const Value wrapstring = argument_or(a, 2, "wrapstring", Value::none());
  const bool break_on_hyphens =
      argument_or(a, 3, "break_on_hyphens", Value::boolean(true)).truthy();
  const std::string separator = wrapstring.is_none() ? "\n" : python_str(wrapstring);
  // jinja2 wraps each line on its own and joins lines and wrapped pieces with `wrapstring`.
  std::string out;
  bool first_line = true;
  for (const std::u32string& text_line : split_lines(decode(python_str(v)))) {
    if (!first_line) out += separator;
    first_line = false;
    bool first_piece = true;
    for (const std::u32string& piece : wrap_line(text_line, static_cast<std::size_t>(width),
                                                 break_long_words, break_on_hyphens)) {
      if (!first_piece) out += separator;
      first_piece = false;
      out += encode(piece);
    }
  }
  return Value::string(std::move(out));
}

Value format(const Value& v, const CallArguments& a, int line) {
  if (!a.positional.empty() && !a.keyword.empty())
    fail(line, "can't handle positional and keyword arguments at the same time");
  Value mapping;
  if (!a.keyword.empty()) {
    auto dict = std::make_shared<Dict>();
    for (const auto& [key, value] : a.keyword) dict->set(key, value);
    mapping = Value::dict(std::move(dict));
  }
  std::string text = percent_format(python_str(v), a.positional,
                                    a.keyword.empty() ? nullptr : &mapping, v.is_markup(), line);
  return like(v, std::move(text));
}

// Python's html.unescape: numeric references (with html's replacements for invalid ones) and
// HTML5's named references, the longest known prefix for a name without its ';'.
std::string unescape_html(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out.push_back(text[i]);
      continue;
    }
    std::size_t j = i + 1;
    if (j < text.size() && text[j] == '#') {
      const bool hex = j + 1 < text.size() && (text[j + 1] == 'x' || text[j + 1] == 'X');
      std::size_t k = j + (hex ? 2 : 1);
      const std::size_t digits_start = k;
      std::uint64_t number = 0;
      while (k < text.size() && (hex ? std::isxdigit(static_cast<unsigned char>(text[k])) != 0
                                     : std::isdigit(static_cast<unsigned char>(text[k])) != 0)) {
        const int c = std::tolower(static_cast<unsigned char>(text[k]));
        number = std::min<std::uint64_t>(
            number * (hex ? 16 : 10) +
                static_cast<std::uint64_t>(std::isdigit(c) ? c - '0' : c - 'a' + 10),
            0x7fffffff);
        ++k;
      }
      if (k == digits_start) {  // no digits: the '&' stays
        out.push_back('&');
        continue;
      }
      if (k < text.size() && text[k] == ';') ++k;
      const auto code = static_cast<char32_t>(number);
      if (const auto replacement = invalid_charref(code)) {
        out += *replacement;
      } else if ((code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) {
        out += "\uFFFD";
      } else if (!is_invalid_codepoint(code)) {
        append_utf8(out, code);
      }
      i = k - 1;
      continue;
    }
    while (j < text.size() && j - i - 1 < 32 &&
           std::string_view("\t\n\f <&#;").find(text[j]) == std::string_view::npos)
      ++j;
    if (j == i + 1) {
      out.push_back('&');
      continue;
    }
    if (j < text.size() && text[j] == ';') ++j;
    const std::string name = text.substr(i + 1, j - i - 1);
    if (const auto entity = html5_entity(name)) {
      out += *entity;
    } else {
      std::size_t length = name.size() - 1;
      for (; length > 1; --length) {
        if (const auto prefix = html5_entity(std::string_view(name).substr(0, length))) {
          out += *prefix;
          out += name.substr(length);
          break;
        }
      }
      if (length <= 1) out += "&" + name;
    }
    i = j - 1;
  }
  return out;
}

// markupsafe's Markup.striptags: comments, then tags, then whitespace runs, then unescape.
Value striptags(const Value& v, const CallArguments&, int line) {
  std::string text = python_str(v);
  for (std::size_t start; (start = text.find("<!--")) != std::string::npos;) {
    const std::size_t end = text.find("-->", start);
    if (end == std::string::npos) break;
    text.erase(start, end + 3 - start);
  }
  for (std::size_t start; (start = text.find('<')) != std::string::npos;) {
    const std::size_t end = text.find('>', start);
    if (end == std::string::npos) break;
    text.erase(start, end + 1 - start);
  }
  std::string collapsed;
  const Value words = split(text, std::nullopt, std::nullopt, line);
  for (const Value& word : words.items()) collapsed += (collapsed.empty() ? "" : " ") + word.text();
  return Value::string(unescape_html(collapsed));
}

}  // namespace

void register_text_filters(FilterTable& table) {
  table.add("trim", trim, OnUndefined::accept);
  table.add("lower", lower, OnUndefined::accept);
  table.add("upper", upper, OnUndefined::accept);
  table.add("title", title, OnUndefined::accept);
  table.add("capitalize", capitalize_filter, OnUndefined::accept);
  table.add("replace", replace);
  table.add("indent", indent, OnUndefined::accept);
  table.add("wordcount", wordcount, OnUndefined::accept);
  table.add("center", center);
  table.add("truncate", truncate);
  table.add("wordwrap", wordwrap);
  table.add("format", format);
  table.add("striptags", striptags);
}

}  // namespace dyncp::data::jinja
