#pragma once
// A guard run on JSON text before any parser sees it, for the two inputs the parsers handle
// badly: a NUL byte (nlohmann's lexer takes it for the end of input, so `{...}\0junk` would
// parse as `{...}`) and deep nesting (the parsers are iterative, but code that walks the parsed
// value recursively — tojson, dumps, destructors of some versions — overflows the stack on
// ~20k levels). Every JSON input of the program (datasets, config.json, tokenizer.json,
// safetensors headers, checkpoint state and manifests, lengths files) passes through it.

#include <cstdint>
#include <string>
#include <string_view>

namespace dyncp::core {

// Deeper than any real input: HF configs and tokenizer files nest < 10 levels, chat samples with
// tool schemas < 20.
inline constexpr int max_json_nesting_depth = 128;

// Throws a data error naming `file`:line (line = first_line + newlines before the problem) for
// a NUL byte or nesting deeper than max_json_nesting_depth; first_line 0: `file` is already a
// location (a JSONL line's "file:line") and is named as it is. Brackets inside strings do not
// count; the text need not be valid JSON otherwise (the parser reports the rest).
void check_json_text(std::string_view text, const std::string& file, std::int64_t first_line = 1);

}  // namespace dyncp::core
