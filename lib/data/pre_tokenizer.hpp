#pragma once
// The `Split` pre-tokenizer of HF tokenizer.json (behavior "Isolated", invert false): every match
// of the regex is one piece, and so is every unmatched gap between matches. The pattern is stored
// in Oniguruma syntax; PCRE2 (UTF + UCP, JIT) runs it after one translation: `\s`/`\S` are
// rewritten to Unicode White_Space, which is what Oniguruma's `\s` means and what PCRE2's does
// not quite (PCRE2 leaves out U+0085). Thread-safe: each split() borrows its own match data and
// JIT stack from a pool (one set per thread that ever splits at once; dataset.num_workers).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace dyncp::data {

class RegexSplitter {
 public:
  // `pattern` in Oniguruma syntax as stored in tokenizer.json; `where` names it in errors.
  RegexSplitter(const std::string& pattern, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls on_piece(offset, length) for each piece of `text` (valid UTF-8), in order.
  void split(std::string_view text,
             const std::function<void(std::size_t, std::size_t)>& on_piece) const;

 private:
  struct Compiled;
  struct Scratch;
  std::unique_ptr<Compiled> compiled_;
};

// The pattern PCRE2 compiles for an Oniguruma pattern (exposed for tests).
std::string translate_oniguruma_pattern(const std::string& pattern);

}  // namespace dyncp::data
