#pragma once
// Opening inputs without trusting them. A FIFO blocks open() until a writer appears and
// /dev/zero never ends, so an input path must name a regular file (symlinks to one are fine),
// checked before it is opened; whole-file reads are bounded before anything is allocated.

#include <cstdint>
#include <filesystem>
#include <string>

namespace dyncp::core {

// Throws a data error naming the path when it is missing or not a regular file. `what` says
// what the file is for ("dataset file", "recipe").
void require_regular_file(const std::filesystem::path& path, const std::string& what);

// The whole file, after require_regular_file and a size check against `max_bytes` (a data
// error naming the size and the limit).
std::string read_bounded_file(const std::filesystem::path& path, std::uintmax_t max_bytes,
                              const std::string& what);

}  // namespace dyncp::core
