#include "config/length_distribution.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "core/error.hpp"

namespace dyncp::config {

namespace {

constexpr const char* key_path = "dataset.mock_length_distribution";
constexpr const char* grammar =
    "write lognormal(min=A,max=B,mean=M,sigma=S), uniform(min=A,max=B) or fixed(length=N)";

[[noreturn]] void fail(const std::string& spec, const std::string& why) {
  core::throw_config_error(key_path, spec + ": " + why + "; " + grammar);
}

std::int64_t positive_integer(const std::string& spec, const std::string& name,
                              const std::string& text) {
  std::int64_t value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size() || value < 1 ||
      value > (std::int64_t{1} << 31)) {
    fail(spec, name + "=" + text + " must be an integer in [1, 2^31]");
  }
  return value;
}

double positive_number(const std::string& spec, const std::string& name, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value <= 0) {
    fail(spec, name + "=" + text + " must be a positive number");
  }
  return value;
}

}  // namespace

LengthDistribution parse_length_distribution(const std::string& spec) {
  const auto open = spec.find('(');
  if (open == std::string::npos || spec.empty() || spec.back() != ')') {
    fail(spec, "not of the form name(key=value,...)");
  }
  const std::string name = spec.substr(0, open);
  std::map<std::string, std::string> args;
  const std::string body = spec.substr(open + 1, spec.size() - open - 2);
  std::size_t start = 0;
  while (start < body.size()) {
    auto comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string item = body.substr(start, comma - start);
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0) fail(spec, "'" + item + "' is not key=value");
    if (!args.emplace(item.substr(0, equals), item.substr(equals + 1)).second) {
      fail(spec, "'" + item.substr(0, equals) + "' is given twice");
    }
    start = comma + 1;
  }
  auto expect_keys = [&](const std::set<std::string>& keys) {
    for (const auto& [key, value] : args) {
      if (keys.count(key) == 0) fail(spec, "unknown parameter '" + key + "' for " + name);
    }
    for (const auto& key : keys) {
      if (args.count(key) == 0) fail(spec, name + " needs " + key + "=");
    }
  };
  LengthDistribution out;
  if (name == "fixed") {
    expect_keys({"length"});
    out.kind = LengthDistribution::Kind::fixed;
    out.min_length = out.max_length = positive_integer(spec, "length", args["length"]);
    return out;
  }
  if (name == "uniform") {
    expect_keys({"min", "max"});
    out.kind = LengthDistribution::Kind::uniform;
  } else if (name == "lognormal") {
    expect_keys({"min", "max", "mean", "sigma"});
    out.kind = LengthDistribution::Kind::lognormal;
    out.mean = positive_number(spec, "mean", args["mean"]);
    out.sigma = positive_number(spec, "sigma", args["sigma"]);
  } else {
    fail(spec, "unknown distribution '" + name + "'");
  }
  out.min_length = positive_integer(spec, "min", args["min"]);
  out.max_length = positive_integer(spec, "max", args["max"]);
  if (out.min_length > out.max_length) fail(spec, "min must be <= max");
  return out;
}

}  // namespace dyncp::config
