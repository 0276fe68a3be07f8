#include "core/input_file.hpp"

#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace dyncp::core {

namespace fs = std::filesystem;

void require_regular_file(const fs::path& path, const std::string& what) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) throw_data_error(path.string(), what + " does not exist");
  if (!fs::is_regular_file(status)) {
    const char* kind = fs::is_directory(status) ? "a folder"
                       : fs::is_fifo(status)    ? "a FIFO"
                       : fs::is_character_file(status) || fs::is_block_file(status)
                           ? "a device"
                           : "not a regular file";
    throw_data_error(path.string(), what + " is " + kind +
                                        "; expected a regular file (pipes and devices are not "
                                        "read: they may block or never end)");
  }
}

std::string read_bounded_file(const fs::path& path, std::uintmax_t max_bytes,
                              const std::string& what) {
  require_regular_file(path, what);
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) throw_data_error(path.string(), "cannot read " + what + ": " + error.message());
  if (size > max_bytes) {
    throw_data_error(path.string(), what + " is " + std::to_string(size) +
                                        " bytes, more than the " + std::to_string(max_bytes) +
                                        " this input may have");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data_error(path.string(), "cannot open " + what);
  std::string text;
  text.resize(static_cast<std::size_t>(size));
  in.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw_data_error(path.string(), "cannot read " + what + " (I/O error)");
  return text;
}

}  // namespace dyncp::core
