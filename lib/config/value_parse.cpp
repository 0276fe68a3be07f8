#include "config/value_parse.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace dyncp::config {

namespace {

bool is_null_text(const RawValue& value) {
  if (value.kind == RawValue::Kind::null) return true;
  if (value.kind != RawValue::Kind::scalar || value.quoted) return false;
  return value.text == "null" || value.text == "Null" || value.text == "NULL" ||
         value.text == "~" || value.text.empty();
}

std::optional<bool> parse_bool(const std::string& text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

std::optional<std::int64_t> parse_integer(const KeySpec& spec, const RawValue& value,
                                          std::string& error) {
  const std::string& text = value.text;
  if (value.kind != RawValue::Kind::scalar || text.empty()) {
    error = "expected an integer";
    return std::nullopt;
  }
  std::int64_t parsed = 0;
  const char* begin = text.data() + (text[0] == '+' ? 1 : 0);
  const auto result = std::from_chars(begin, text.data() + text.size(), parsed);
  if (result.ec == std::errc::result_out_of_range) {
    error = "overflows a 64-bit integer; the largest accepted value is " +
            std::to_string(spec.max_integer);
    return std::nullopt;
  }
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) {
    error = "expected an integer (" + type_name(spec) + ")";
    return std::nullopt;
  }
  if (parsed < spec.min_integer) {
    error = "must be at least " + std::to_string(spec.min_integer) +
            (spec.min_integer == 1 ? " (sizes and counts are positive)" : "");
    return std::nullopt;
  }
  if (parsed > spec.max_integer) {
    error = "too large: must be at most " + std::to_string(spec.max_integer);
    return std::nullopt;
  }
  return parsed;
}

std::optional<double> parse_number(const RawValue& value, std::string& error) {
  const std::string& text = value.text;
  if (value.kind == RawValue::Kind::scalar && !text.empty()) {
    char* end = nullptr;
    errno = 0;
    const double parsed = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() && std::isfinite(parsed) && errno != ERANGE) {
      return parsed;
    }
    if (end == text.c_str() + text.size()) {
      error = "not a finite number (overflow or inf/nan)";
      return std::nullopt;
    }
  }
  error = "expected a number";
  return std::nullopt;
}

std::optional<std::string> parse_choice(const KeySpec& spec, const RawValue& value,
                                        std::string& error) {
  if (value.kind != RawValue::Kind::scalar) {
    error = "expected a string";
    return std::nullopt;
  }
  if (spec.choices.empty() ||
      std::find(spec.choices.begin(), spec.choices.end(), value.text) != spec.choices.end()) {
    return value.text;
  }
  std::string joined;
  for (const auto& choice : spec.choices) joined += (joined.empty() ? "" : ", ") + choice;
  error = "expected one of [" + joined + "]";
  const auto suggestion = closest_match(value.text, spec.choices);
  if (!suggestion.empty()) error += "; did you mean " + suggestion + "?";
  return std::nullopt;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string leaf_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::string describe_raw(const RawValue& value) {
  switch (value.kind) {
    case RawValue::Kind::null:
      return "null";
    case RawValue::Kind::scalar:
      return value.quoted ? "\"" + value.text + "\"" : value.text;
    case RawValue::Kind::map:
      return "{...}";
    case RawValue::Kind::list: {
      std::string out;
      for (const auto& item : value.items) out += (out.empty() ? "" : ", ") + describe_raw(item);
      return "[" + out + "]";
    }
  }
  return "?";
}

std::optional<KeyValue> parse_value(const KeySpec& spec, const RawValue& value,
                                    std::string& error) {
  if (value.kind == RawValue::Kind::map) {
    error = "expected " + type_name(spec) + ", not a mapping";
    return std::nullopt;
  }
  if (is_null_text(value)) {
    if (spec.nullable) return KeyValue{std::monostate{}};
    if (spec.type == KeyType::string) return KeyValue{std::string()};  // Bridge writes `save: null`
    error = "must not be null; expected " + type_name(spec);
    return std::nullopt;
  }
  const bool is_list_type = spec.type == KeyType::integer_list || spec.type == KeyType::choice_list;
  if (is_list_type != (value.kind == RawValue::Kind::list)) {
    error = "expected " + type_name(spec) + (is_list_type ? " written as [a, b, ...]" : "");
    return std::nullopt;
  }
  switch (spec.type) {
    case KeyType::boolean: {
      const auto parsed = parse_bool(value.text);
      if (!parsed) {
        error = "expected a boolean (true or false)";
        return std::nullopt;
      }
      return KeyValue{*parsed};
    }
    case KeyType::integer: {
      const auto parsed = parse_integer(spec, value, error);
      if (!parsed) return std::nullopt;
      return KeyValue{*parsed};
    }
    case KeyType::number: {
      const auto parsed = parse_number(value, error);
      if (!parsed) return std::nullopt;
      return KeyValue{*parsed};
    }
    case KeyType::string:
      return KeyValue{value.text};
    case KeyType::choice: {
      auto parsed = parse_choice(spec, value, error);
      if (!parsed) return std::nullopt;
      return KeyValue{std::move(*parsed)};
    }
    case KeyType::integer_list: {
      std::vector<std::int64_t> items;
      for (const auto& item : value.items) {
        const auto parsed = parse_integer(spec, item, error);
        if (!parsed) {
          error = "list item " + describe_raw(item) + ": " + error;
          return std::nullopt;
        }
        items.push_back(*parsed);
      }
      return KeyValue{std::move(items)};
    }
    case KeyType::choice_list: {
      std::vector<std::string> items;
      for (const auto& item : value.items) {
        auto parsed = parse_choice(spec, item, error);
        if (!parsed) {
          error = "list item " + describe_raw(item) + ": " + error;
          return std::nullopt;
        }
        items.push_back(std::move(*parsed));
      }
      return KeyValue{std::move(items)};
    }
  }
  error = "unsupported key type";
  return std::nullopt;
}

std::string canonical_scalar(const RawValue& value) {
  if (is_null_text(value)) return "null";
  if (value.kind != RawValue::Kind::scalar) return describe_raw(value);
  if (!value.quoted) {
    if (const auto parsed = parse_bool(value.text)) return *parsed ? "true" : "false";
  }
  return value.text;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : candidates) {
    const auto distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const std::size_t allowed = std::max<std::size_t>(2, word.size() / 4);
  return best_distance <= allowed ? best : std::string();
}

std::string did_you_mean_key(const std::string& unknown_path) {
  const auto names = all_key_names();
  auto suggestion = closest_match(unknown_path, names);
  if (suggestion.empty()) {
    // The right name in the wrong section (`seq_length` at the top, `train.seq_length`).
    const auto leaf = leaf_of(unknown_path);
    for (const auto& name : names) {
      if (leaf_of(name) == leaf) {
        suggestion = name;
        break;
      }
    }
  }
  return suggestion.empty() ? std::string() : "; did you mean " + suggestion + "?";
}

}  // namespace dyncp::config
