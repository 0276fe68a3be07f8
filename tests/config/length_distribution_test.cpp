#include "config/length_distribution.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.hpp"

using dyncp::core::Error;
using dyncp::core::ErrorKind;
using namespace dyncp::config;

TEST_CASE("every named distribution parses with its defaults and round-trips", "[packing]") {
  for (const auto& name : length_distribution_names()) {
    const LengthDistribution d = parse_length_distribution(name);
    const LengthDistribution again = parse_length_distribution(d.to_spec());
    CHECK(again.to_spec() == d.to_spec());
    const auto lengths = sample_lengths(d, 2000, 7, 0);
    for (const auto length : lengths) {
      REQUIRE(length >= d.min_length);
      REQUIRE(length <= d.max_length);
    }
  }
}

TEST_CASE("lognormal mean and clamp follow Megatron's mock varlen law", "[packing]") {
  // Unclamped (wide bounds): the arithmetic mean is `mean`, the median mean x exp(-sigma^2/2).
  const auto wide = parse_length_distribution("lognormal:mean=1024,sigma=0.5,min=1,max=100000000");
  auto lengths = sample_lengths(wide, 40000, 1, 3);
  double sum = 0.0;
  for (const auto length : lengths) sum += static_cast<double>(length);
  CHECK(sum / static_cast<double>(lengths.size()) == Approx(1024.0 - 0.5).epsilon(0.02));
  std::sort(lengths.begin(), lengths.end());
  CHECK(static_cast<double>(lengths[lengths.size() / 2]) ==
        Approx(1024.0 * std::exp(-0.125)).epsilon(0.03));
  // The benchmark's spec: median 1024 x exp(-1.125) = 332, many clamped at 128, some at 8192.
  const auto d = parse_length_distribution("lognormal:mean=1024,sigma=1.5,min=128,max=8192");
  auto clamped = sample_lengths(d, 20000, 1, 3);
  std::sort(clamped.begin(), clamped.end());
  CHECK(static_cast<double>(clamped[clamped.size() / 2]) == Approx(332.0).epsilon(0.08));
  CHECK(clamped.front() == 128);
  CHECK(clamped.back() == 8192);
}

TEST_CASE("the recipe form name(key=value,...) and `fixed` are accepted", "[packing]") {
  const auto paren = parse_length_distribution("lognormal(min=64,max=4096,mean=1024,sigma=1.0)");
  const auto colon = parse_length_distribution("lognormal:min=64,max=4096,mean=1024,sigma=1.0");
  CHECK(paren.to_spec() == colon.to_spec());
  CHECK(sample_lengths(paren, 50, 3, 1) == sample_lengths(colon, 50, 3, 1));
  const auto fixed = parse_length_distribution("fixed(length=256)");
  CHECK(fixed.kind == LengthDistributionKind::equal);
  CHECK(sample_length(fixed, 1, 2, 3) == 256);
  CHECK(parse_length_distribution("uniform(min=16,max=512)").max_length == 512);
}

TEST_CASE("draws are a pure function of seed, step and index", "[packing]") {
  const auto d = parse_length_distribution("lmsys");
  const auto a = sample_lengths(d, 500, 11, 4);
  const auto b = sample_lengths(d, 500, 11, 4);
  const auto other_step = sample_lengths(d, 500, 11, 5);
  const auto other_seed = sample_lengths(d, 500, 12, 4);
  CHECK(a == b);
  CHECK(a != other_step);
  CHECK(a != other_seed);
  for (std::size_t i = 0; i < a.size(); i += 37) CHECK(a[i] == sample_length(d, 11, 4, i));
}

TEST_CASE("mixtures put the advertised share in each component", "[packing]") {
  const auto trajectory = parse_length_distribution("trajectory:seq_length=32768");
  const auto t = sample_lengths(trajectory, 10000, 3, 0);
  const auto full = std::count(t.begin(), t.end(), 32768);
  CHECK(full > 8700);
  CHECK(full < 9300);
  const auto llama = parse_length_distribution("llama3_long:long_fraction=0.05");
  const auto l = sample_lengths(llama, 10000, 3, 0);
  const auto longs = std::count_if(l.begin(), l.end(), [](auto x) { return x > 16000; });
  CHECK(longs > 400);
  CHECK(longs < 600);
  const auto equal = sample_lengths(parse_length_distribution("equal:length=333"), 10, 1, 1);
  CHECK(std::all_of(equal.begin(), equal.end(), [](auto x) { return x == 333; }));
  const auto uniform = sample_lengths(parse_length_distribution("uniform:min=5,max=7"), 3000, 1, 1);
  for (std::int64_t v = 5; v <= 7; ++v) CHECK(std::count(uniform.begin(), uniform.end(), v) > 900);
}

TEST_CASE("bad specs are config errors that say what is wrong", "[packing]") {
  auto fails_with = [](const std::string& spec, const std::string& text) {
    try {
      parse_length_distribution(spec, "--distribution");
      FAIL("no error for " << spec);
    } catch (const Error& error) {
      CHECK(error.kind() == ErrorKind::config);
      CHECK_THAT(error.what(), Catch::Contains("--distribution") && Catch::Contains(text));
    }
  };
  fails_with("gauss:mean=3", "expected one of [lognormal");
  fails_with("lognormal:mu=3", "unknown parameter 'mu'");
  fails_with("lognormal:mean=abc", "not a number");
  fails_with("lognormal:mean", "not key=value");
  fails_with("lognormal:min=900,max=100", "must be <= max");
  fails_with("uniform:min=0,max=10", "positive whole number");
  fails_with("equal:length=12.5", "positive whole number");
  fails_with("llama3_long:long_fraction=2", "[0, 1]");
  fails_with("lognormal:mean=5,mean=6", "given twice");
}
