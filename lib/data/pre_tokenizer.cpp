#include "data/pre_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/error.hpp"

namespace dyncp::data {

namespace {
// Unicode White_Space (Oniguruma's `\s` under UTF-8), written as class members.
constexpr std::string_view white_space_members =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
}  // namespace

std::string translate_oniguruma_pattern(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[++i];
      if (escaped == 's') {
        out += in_class ? std::string(white_space_members)
                        : "[" + std::string(white_space_members) + "]";
      } else if (escaped == 'S') {
        if (in_class) {
          core::throw_data_error("pre_tokenizer.pattern",
                                 "\\S inside a character class is not supported");
        }
        out += "[^" + std::string(white_space_members) + "]";
      } else {
        out.push_back(c);
        out.push_back(escaped);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

// What one match needs besides the pattern: PCRE2's match data and the JIT stack (written by
// every match, so one set per concurrent split()).
struct RegexSplitter::Scratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  Scratch(const pcre2_code* code, bool jit) {
    match_data = pcre2_match_data_create_from_pattern(code, nullptr);
    match_context = pcre2_match_context_create(nullptr);
    if (match_data == nullptr || match_context == nullptr)
      core::throw_runtime_error("pre-tokenizer: out of memory for PCRE2 match data");
    if (jit) {
      // Long whitespace runs backtrack through `\s+(?!\S)`; the default 32 KiB stack is too
      // small.
      jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(match_context, nullptr, jit_stack);
    }
  }
  ~Scratch() {
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
    if (match_context) pcre2_match_context_free(match_context);
    if (match_data) pcre2_match_data_free(match_data);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  // Idle scratch sets; split() takes one (or makes one) and gives it back.
  std::mutex mutex;
  std::vector<std::unique_ptr<Scratch>> idle;

  std::unique_ptr<Scratch> borrow() {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!idle.empty()) {
        std::unique_ptr<Scratch> scratch = std::move(idle.back());
        idle.pop_back();
        return scratch;
      }
    }
    return std::make_unique<Scratch>(code, jit);
  }
  void give_back(std::unique_ptr<Scratch> scratch) {
    const std::lock_guard<std::mutex> lock(mutex);
    idle.push_back(std::move(scratch));
  }
};

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& where)
    : compiled_(std::make_unique<Compiled>()) {
  const std::string translated = translate_oniguruma_pattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    core::throw_data_error(where, "cannot compile pre-tokenizer regex at offset " +
                                      std::to_string(error_offset) + ": " +
                                      reinterpret_cast<const char*>(message));
  }
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
  compiled_->give_back(std::make_unique<Scratch>(compiled_->code, compiled_->jit));
}

RegexSplitter::~RegexSplitter() {
  compiled_->idle.clear();
  if (compiled_->code) pcre2_code_free(compiled_->code);
}

void RegexSplitter::split(std::string_view text,
                          const std::function<void(std::size_t, std::size_t)>& on_piece) const {
  // Borrowed for this call; returned on every exit (on_piece may throw).
  struct Lease {
    Compiled& owner;
    std::unique_ptr<Scratch> scratch;
    ~Lease() { owner.give_back(std::move(scratch)); }
  } lease{*compiled_, compiled_->borrow()};
  pcre2_match_data* const match_data = lease.scratch->match_data;
  pcre2_match_context* const match_context = lease.scratch->match_context;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t position = 0;
  while (position < text.size()) {
    const int result = compiled_->jit
                           ? pcre2_jit_match(compiled_->code, subject, text.size(), position,
                                             PCRE2_NO_UTF_CHECK, match_data, match_context)
                           : pcre2_match(compiled_->code, subject, text.size(), position,
                                         PCRE2_NO_UTF_CHECK, match_data, match_context);
    if (result == PCRE2_ERROR_NOMATCH) break;
    if (result < 0) {
      core::throw_runtime_error("pre-tokenizer regex failed with PCRE2 error " +
                                std::to_string(result));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const std::size_t start = ovector[0];
    std::size_t end = ovector[1];
    if (start > position) on_piece(position, start - position);
    if (end == start) {
      // An empty match cannot make progress: step over one code point as part of a gap.
      std::size_t next = start + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      on_piece(start, next - start);
      end = next;
    } else {
      on_piece(start, end - start);
    }
    position = end;
  }
  if (position < text.size()) on_piece(position, text.size() - position);
}

}  // namespace dyncp::data
