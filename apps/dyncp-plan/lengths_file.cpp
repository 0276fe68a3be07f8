#include "lengths_file.hpp"

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text_check.hpp"

namespace dyncp::plan {
namespace {

std::int64_t parse_positive(const std::string& text, const std::string& where) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    core::throw_data_error(where, "'" + text + "' is not an integer length (one per line)");
  }
  if (value < 1) {
    core::throw_data_error(where, "length " + text + " is not positive");
  }
  return value;
}

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

LengthsFile read_json(const std::string& path, const std::string& content) {
  core::check_json_text(content, path);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(content);
  } catch (const nlohmann::json::exception& error) {
    // parse_error, and out_of_range for a number past double's range.
    core::throw_data_error(path, std::string("invalid JSON: ") + error.what());
  }
  if (root.is_object() && root.contains("lengths")) root = root["lengths"];
  if (!root.is_array()) {
    core::throw_data_error(path, "expected a JSON array of lengths or {\"lengths\": [...]}");
  }
  LengthsFile file;
  for (std::size_t i = 0; i < root.size(); ++i) {
    const std::string where = path + "[" + std::to_string(i) + "]";
    if (!root[i].is_number_integer()) {
      core::throw_data_error(where, root[i].dump() + " is not an integer length");
    }
    const auto value = root[i].get<std::int64_t>();
    if (value < 1)
      core::throw_data_error(where, "length " + std::to_string(value) + " is not positive");
    file.lengths.push_back(value);
    file.origins.push_back(where);
  }
  return file;
}

}  // namespace

LengthsFile read_lengths_file(const std::string& path) {
  // A million lengths take about 8 MB; 256 MiB is far past any real lengths file.
  const std::string content = core::read_bounded_file(path, 256 << 20, "the lengths file");
  const auto first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (content[first] == '[' || content[first] == '{')) {
    LengthsFile file = read_json(path, content);
    if (file.lengths.empty()) core::throw_data_error(path, "holds no length");
    return file;
  }
  LengthsFile file;
  std::istringstream lines(content);
  std::string line;
  for (std::int64_t number = 1; std::getline(lines, line); ++number) {
    const std::string text = trim(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(number);
    file.lengths.push_back(parse_positive(text, where));
    file.origins.push_back(where);
  }
  if (file.lengths.empty()) core::throw_data_error(path, "holds no length");
  return file;
}

}  // namespace dyncp::plan
