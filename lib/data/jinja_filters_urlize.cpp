// jinja2's urlize filter (jinja2.utils.urlize and filters.do_urlize with the default policies:
// rel "noopener", no target, no extra schemes), with jinja2's own URL and e-mail patterns run
// by PCRE2 in Unicode mode, as Python's re runs them on str.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <memory>
#include <set>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"
#include "data/jinja_registry.hpp"
#include "data/utf8.hpp"

namespace dyncp::data::jinja {

namespace {

class Pattern {
 public:
  Pattern(const char* pattern, std::uint32_t options) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          options | PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code_ == nullptr) throw TemplateError(0, "urlize: a built-in pattern does not compile");
  }
  ~Pattern() { pcre2_code_free(code_); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // re.match: a match anchored at the start (the patterns carry their own ^ and $).
  bool matches(std::string_view text) const {
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    const int found = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                                  0, data, nullptr);
    pcre2_match_data_free(data);
    return found >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
};

const Pattern& http_pattern() {
  static const Pattern pattern(R"(
    ^
    (
        (https?://|www\.)  # scheme or www
        (([\w%-]+\.)+)?  # subdomain
        (
            [a-z]{2,63}  # basic tld
        |
            xn--[\w%]{2,59}  # idna tld
        )
    |
        ([\w%-]{2,63}\.)+  # basic domain
        (com|net|int|edu|gov|org|info|mil)  # basic tld
    |
        (https?://)  # scheme
        (
            (([\d]{1,3})(\.[\d]{1,3}){3})  # IPv4
        |
            (\[([\da-f]{0,4}:){2}([\da-f]{0,4}:?){1,6}])  # IPv6
        )
    )
    (?::[\d]{1,5})?  # port
    (?:[/?#]\S*)?  # path, query, and fragment
    $
    )",
                               PCRE2_CASELESS | PCRE2_EXTENDED);
  return pattern;
}

const Pattern& email_pattern() {
  static const Pattern pattern(R"(^\S+@\w[\w.-]*\.\w+$)", 0);
  return pattern;
}

const Pattern& scheme_pattern() {
  static const Pattern pattern(R"(^([\w.+-]{2,}:(/){0,2})$)", 0);
  return pattern;
}

std::size_t count_of(const std::string& text, const std::string& piece) {
  std::size_t count = 0;
  for (std::size_t at = text.find(piece); at != std::string::npos;
       at = text.find(piece, at + piece.size()))
    ++count;
  return count;
}

struct LinkOptions {
  std::optional<std::int64_t> trim_limit;
  std::string rel_attr;
  std::string target_attr;
  std::vector<std::string> extra_schemes;
};

std::string trim_url(const std::string& url, const LinkOptions& options) {
  if (!options.trim_limit || code_point_count(url) <= *options.trim_limit) return url;
  return encode(std::u32string_view(decode(url))
                    .substr(0, static_cast<std::size_t>(*options.trim_limit))) +
         "...";
}

// One whitespace-free word: leading ( < &lt; and trailing ) > . , &gt; stay outside the link.
std::string link_word(const std::string& word, const LinkOptions& options) {
  std::string head;
  std::string middle = word;
  std::string tail;
  while (true) {
    if (middle.starts_with("(") || middle.starts_with("<")) {
      head += middle.substr(0, 1);
      middle.erase(0, 1);
    } else if (middle.starts_with("&lt;")) {
      head += "&lt;";
      middle.erase(0, 4);
    } else {
      break;
    }
  }
  while (!middle.empty()) {
    if (middle.ends_with("&gt;")) {
      tail.insert(0, "&gt;");
      middle.resize(middle.size() - 4);
    } else if (std::string_view(")>.,\n").find(middle.back()) != std::string_view::npos) {
      tail.insert(0, 1, middle.back());
      middle.pop_back();
    } else {
      break;
    }
  }
  // Prefer balancing parentheses in URLs to leaving a trailing character out.
  for (const auto& [open, close] :
       {std::pair<std::string, std::string>{"(", ")"}, {"<", ">"}, {"&lt;", "&gt;"}}) {
    const std::size_t opened = count_of(middle, open);
    if (opened <= count_of(middle, close)) continue;
    for (std::size_t i = 0, moves = std::min(opened, count_of(tail, close)); i < moves; ++i) {
      const std::size_t end = tail.find(close) + close.size();
      middle += tail.substr(0, end);
      tail.erase(0, end);
    }
  }
  if (http_pattern().matches(middle)) {
    const bool has_scheme = middle.starts_with("https://") || middle.starts_with("http://");
    middle = "<a href=\"" + std::string(has_scheme ? "" : "https://") + middle + "\"" +
             options.rel_attr + options.target_attr + ">" + trim_url(middle, options) + "</a>";
  } else if (middle.starts_with("mailto:") && email_pattern().matches(middle.substr(7))) {
    middle = "<a href=\"" + middle + "\">" + middle.substr(7) + "</a>";
  } else if (middle.find('@') != std::string::npos && !middle.starts_with("www.") &&
             !middle.starts_with("@") && middle.find(':') == std::string::npos &&
             email_pattern().matches(middle)) {
    middle = "<a href=\"mailto:" + middle + "\">" + middle + "</a>";
  } else {
    for (const std::string& scheme : options.extra_schemes) {
      if (middle != scheme && middle.starts_with(scheme))
        middle = "<a href=\"" + middle + "\"" + options.rel_attr + options.target_attr + ">" +
                 middle + "</a>";
    }
  }
  return head + middle + tail;
}

Value urlize(const Value& v, const CallArguments& a, int line) {
  LinkOptions options;
  const Value limit = argument_or(a, 0, "trim_url_limit", Value::none());
  if (!limit.is_none()) options.trim_limit = require_int(limit, "urlize(trim_url_limit)", line);
  const bool nofollow = argument_or(a, 1, "nofollow", Value::boolean(false)).truthy();
  const Value target = argument_or(a, 2, "target", Value::none());
  const Value rel = argument_or(a, 3, "rel", Value::none());
  const Value schemes = argument_or(a, 4, "extra_schemes", Value::none());
  std::set<std::string> rel_parts;
  if (!rel.is_none()) {
    const Value parts = split(python_str(rel), std::nullopt, std::nullopt, line);
    for (const Value& part : parts.items()) rel_parts.insert(part.text());
  }
  if (nofollow) rel_parts.insert("nofollow");
  rel_parts.insert("noopener");  // jinja2's policy urlize.rel
  std::string rel_text;
  for (const std::string& part : rel_parts) rel_text += (rel_text.empty() ? "" : " ") + part;
  options.rel_attr = " rel=\"" + escape_html(rel_text) + "\"";
  if (!target.is_none() && target.truthy())
    options.target_attr = " target=\"" + escape_html(python_str(target)) + "\"";
  if (!schemes.is_none()) {
    for (const Value& scheme : iterate(schemes, line)) {
      const std::string text = python_str(scheme);
      if (!scheme_pattern().matches(text)) fail(line, text + " is not a valid URI scheme prefix.");
      options.extra_schemes.push_back(text);
    }
  }
  const std::string text = v.is_markup() ? v.text() : escape_html(python_str(v));
  // re.split(r"(\s+)"): whitespace runs are kept as they are.
  std::string out;
  std::size_t offset = 0;
  while (offset < text.size()) {
    const std::size_t start = offset;
    const bool space = is_python_space(next_code_point(text, offset));
    while (offset < text.size()) {
      std::size_t probe = offset;
      if (is_python_space(next_code_point(text, probe)) != space) break;
      offset = probe;
    }
    const std::string piece = text.substr(start, offset - start);
    out += space ? piece : link_word(piece, options);
  }
  return Value::string(std::move(out));
}

}  // namespace

void register_urlize_filter(FilterTable& table) {
  table.add("urlize", urlize);
}

}  // namespace dyncp::data::jinja
