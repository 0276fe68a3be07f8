#pragma once
// Reading a lengths file for dyncp-plan: one positive integer per line (blank lines and lines
// starting with '#' are skipped), or JSON: an array of integers or {"lengths": [...]}.
// Lengths are taken as given (no padding), so Megatron's own inputs can be replayed. Errors
// are data errors naming file:line (or file and JSON index).

#include <cstdint>
#include <string>
#include <vector>

namespace dyncp::plan {

struct LengthsFile {
  std::vector<std::int64_t> lengths;
  std::vector<std::string> origins;  // "file:line" or "file[index]" of each length
};

LengthsFile read_lengths_file(const std::string& path);

}  // namespace dyncp::plan
