#include "config/length_distribution.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace dyncp::config {
namespace {

using Kind = LengthDistributionKind;

struct KindName {
  Kind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {Kind::lognormal, "lognormal"},   {Kind::llama3_long, "llama3_long"}, {Kind::lmsys, "lmsys"},
    {Kind::trajectory, "trajectory"}, {Kind::uniform, "uniform"},         {Kind::equal, "equal"},
};

const char* name_of(Kind kind) {
  for (const auto& entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "?";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Defaults per kind; the struct's own defaults are those of `lognormal`.
LengthDistribution defaults_for(Kind kind) {
  LengthDistribution d;
  d.kind = kind;
  switch (kind) {
    case Kind::lognormal:
      break;
    case Kind::llama3_long:
      d.mean = 1024.0;
      d.sigma = 0.8;
      d.min_length = 16;
      d.max_length = 131072;
      break;
    case Kind::lmsys:
      d.mean = 600.0;
      d.sigma = 1.1;
      d.min_length = 16;
      d.max_length = 300000;
      break;
    case Kind::trajectory:
      d.min_length = 1024;
      d.max_length = d.seq_length;
      break;
    case Kind::uniform:
      break;
    case Kind::equal:
      d.min_length = d.max_length = 4096;
      break;
  }
  return d;
}

// The keys each kind accepts, in canonical order.
std::vector<std::string> keys_of(Kind kind) {
  switch (kind) {
    case Kind::lognormal:
      return {"mean", "sigma", "min", "max"};
    case Kind::llama3_long:
      return {"short_mean",    "short_sigma", "long_mean", "long_sigma",
              "long_fraction", "min",         "max"};
    case Kind::lmsys:
      return {"mean", "sigma", "tail_fraction", "tail_min", "min", "max"};
    case Kind::trajectory:
      return {"seq_length", "full_fraction", "min"};
    case Kind::uniform:
      return {"min", "max"};
    case Kind::equal:
      return {"length"};
  }
  return {};
}

double parse_number(const std::string& key_path, const std::string& key, const std::string& text) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) {
    core::throw_config_error(key_path, "parameter '" + key + "': '" + text +
                                           "' is not a number (write e.g. " + key + "=1024)");
  }
  return value;
}

std::int64_t as_length(const std::string& key_path, const std::string& key, double value) {
  if (value < 1.0 || value > 1e12 || value != std::floor(value)) {
    std::ostringstream os;
    os << "parameter '" << key << "': " << value << " must be a positive whole number of tokens";
    core::throw_config_error(key_path, os.str());
  }
  return static_cast<std::int64_t>(value);
}

void require(bool ok, const std::string& key_path, const std::string& rule) {
  if (!ok) core::throw_config_error(key_path, rule);
}

void set_parameter(LengthDistribution& d, const std::string& key_path, const std::string& key,
                   double value) {
  auto fraction = [&](double v) {
    require(v >= 0.0 && v <= 1.0, key_path, "parameter '" + key + "' must lie in [0, 1]");
    return v;
  };
  auto positive = [&](double v) {
    require(v > 0.0, key_path, "parameter '" + key + "' must be > 0");
    return v;
  };
  if (key == "mean" || key == "short_mean") {
    d.mean = positive(value);
  } else if (key == "sigma" || key == "short_sigma") {
    require(value >= 0.0, key_path, "parameter '" + key + "' must be >= 0");
    d.sigma = value;
  } else if (key == "long_mean") {
    d.long_mean = positive(value);
  } else if (key == "long_sigma") {
    require(value >= 0.0, key_path, "parameter '" + key + "' must be >= 0");
    d.long_sigma = value;
  } else if (key == "long_fraction") {
    d.long_fraction = fraction(value);
  } else if (key == "tail_fraction") {
    d.tail_fraction = fraction(value);
  } else if (key == "full_fraction") {
    d.full_fraction = fraction(value);
  } else if (key == "tail_min") {
    d.tail_min_length = as_length(key_path, key, value);
  } else if (key == "seq_length") {
    d.seq_length = as_length(key_path, key, value);
    d.max_length = d.seq_length;
  } else if (key == "min") {
    d.min_length = as_length(key_path, key, value);
  } else if (key == "max") {
    d.max_length = as_length(key_path, key, value);
  } else if (key == "length") {
    d.min_length = d.max_length = as_length(key_path, key, value);
  }
}

// Clamp, then truncate toward zero (numpy's clip(...).astype(int)).
std::int64_t clamp_truncate(double value, std::int64_t lo, std::int64_t hi) {
  if (!(value >= static_cast<double>(lo))) return lo;  // also catches NaN
  if (value >= static_cast<double>(hi)) return hi;
  return std::clamp(static_cast<std::int64_t>(value), lo, hi);
}

// A lognormal draw whose unclamped law has arithmetic mean `mean`: mu = ln(mean) - sigma^2/2
// (Megatron's mock varlen dataset).
double lognormal_with_mean(core::Rng& rng, double mean, double sigma) {
  return std::exp(std::log(mean) - 0.5 * sigma * sigma + sigma * rng.normal());
}

double log_uniform(core::Rng& rng, double lo, double hi) {
  return std::exp(std::log(lo) + rng.uniform() * (std::log(hi) - std::log(lo)));
}

}  // namespace

std::vector<std::string> length_distribution_names() {
  std::vector<std::string> names;
  for (const auto& entry : kKindNames) names.emplace_back(entry.name);
  return names;
}

LengthDistribution parse_length_distribution(std::string_view spec, const std::string& key_path) {
  std::string text(spec);
  // The recipe form name(key=value,...) is the same spec written with parentheses.
  const auto open = text.find('(');
  if (open != std::string::npos && text.back() == ')' && text.find(':') == std::string::npos) {
    text = text.substr(0, open) + ":" + text.substr(open + 1, text.size() - open - 2);
    if (text.back() == ':') text.pop_back();
  }
  if (text.rfind("fixed", 0) == 0 && (text.size() == 5 || text[5] == ':')) {
    text = "equal" + text.substr(5);  // the recipe's name for a constant length
  }
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const KindName* found = nullptr;
  for (const auto& entry : kKindNames) {
    if (name == entry.name) found = &entry;
  }
  if (found == nullptr) {
    core::throw_config_error(key_path, "unknown length distribution '" + name +
                                           "'; expected one of [" +
                                           join(length_distribution_names()) + "]");
  }
  LengthDistribution d = defaults_for(found->kind);
  const std::vector<std::string> keys = keys_of(found->kind);
  std::map<std::string, bool> seen;
  if (colon != std::string::npos) {
    std::stringstream params(text.substr(colon + 1));
    std::string item;
    while (std::getline(params, item, ',')) {
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        core::throw_config_error(key_path, "'" + item + "' in '" + text +
                                               "' is not key=value (parameters of " + name + ": " +
                                               join(keys) + ")");
      }
      const std::string key = item.substr(0, eq);
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        core::throw_config_error(key_path, "unknown parameter '" + key + "' for " + name +
                                               "; expected one of [" + join(keys) + "]");
      }
      if (seen[key]) core::throw_config_error(key_path, "parameter '" + key + "' given twice");
      seen[key] = true;
      set_parameter(d, key_path, key, parse_number(key_path, key, item.substr(eq + 1)));
    }
  }
  require(d.min_length <= d.max_length, key_path,
          name + ": min (" + std::to_string(d.min_length) + ") must be <= max (" +
              std::to_string(d.max_length) + ")");
  if (d.kind == Kind::lmsys) {
    require(d.tail_min_length <= d.max_length, key_path,
            "lmsys: tail_min must be <= max (" + std::to_string(d.max_length) + ")");
  }
  return d;
}

std::string LengthDistribution::to_spec() const {
  std::ostringstream os;
  os << name_of(kind) << ':';
  switch (kind) {
    case Kind::lognormal:
      os << "mean=" << mean << ",sigma=" << sigma << ",min=" << min_length << ",max=" << max_length;
      break;
    case Kind::llama3_long:
      os << "short_mean=" << mean << ",short_sigma=" << sigma << ",long_mean=" << long_mean
         << ",long_sigma=" << long_sigma << ",long_fraction=" << long_fraction
         << ",min=" << min_length << ",max=" << max_length;
      break;
    case Kind::lmsys:
      os << "mean=" << mean << ",sigma=" << sigma << ",tail_fraction=" << tail_fraction
         << ",tail_min=" << tail_min_length << ",min=" << min_length << ",max=" << max_length;
      break;
    case Kind::trajectory:
      os << "seq_length=" << seq_length << ",full_fraction=" << full_fraction
         << ",min=" << min_length;
      break;
    case Kind::uniform:
      os << "min=" << min_length << ",max=" << max_length;
      break;
    case Kind::equal:
      os << "length=" << min_length;
      break;
  }
  return os.str();
}

std::int64_t sample_length(const LengthDistribution& d, std::uint64_t seed, std::uint64_t step,
                           std::uint64_t index) {
  // One private stream per sample: random access without any sequential state.
  core::Rng rng(core::random_bits(seed, core::RngPurpose::mock_lengths, step, index),
                core::RngPurpose::mock_lengths);
  const double lo = static_cast<double>(d.min_length);
  const double hi = static_cast<double>(d.max_length);
  switch (d.kind) {
    case Kind::lognormal:
      return clamp_truncate(lognormal_with_mean(rng, d.mean, d.sigma), d.min_length, d.max_length);
    case Kind::llama3_long: {
      const bool is_long = rng.uniform() < d.long_fraction;
      return clamp_truncate(is_long ? lognormal_with_mean(rng, d.long_mean, d.long_sigma)
                                    : lognormal_with_mean(rng, d.mean, d.sigma),
                            d.min_length, d.max_length);
    }
    case Kind::lmsys: {
      if (rng.uniform() < d.tail_fraction) {
        return clamp_truncate(log_uniform(rng, static_cast<double>(d.tail_min_length), hi),
                              d.min_length, d.max_length);
      }
      return clamp_truncate(lognormal_with_mean(rng, d.mean, d.sigma), d.min_length, d.max_length);
    }
    case Kind::trajectory:
      if (rng.uniform() < d.full_fraction) return d.seq_length;
      return clamp_truncate(log_uniform(rng, lo, static_cast<double>(d.seq_length)), d.min_length,
                            d.seq_length);
    case Kind::uniform:
      return d.min_length + static_cast<std::int64_t>(rng.below(
                                static_cast<std::uint64_t>(d.max_length - d.min_length + 1)));
    case Kind::equal:
      return d.min_length;
  }
  return d.min_length;
}

std::vector<std::int64_t> sample_lengths(const LengthDistribution& distribution, std::size_t count,
                                         std::uint64_t seed, std::uint64_t step) {
  std::vector<std::int64_t> lengths(count);
  for (std::size_t i = 0; i < count; ++i) lengths[i] = sample_length(distribution, seed, step, i);
  return lengths;
}

}  // namespace dyncp::config
