#include "config/length_distribution.hpp"

#include <catch2/catch.hpp>

#include "core/error.hpp"

using namespace dyncp::config;
using Catch::Contains;

TEST_CASE("length distribution specs parse", "[config]") {
  const auto lognormal =
      parse_length_distribution("lognormal(min=64,max=8192,mean=1024,sigma=1.5)");
  CHECK(lognormal.kind == LengthDistribution::Kind::lognormal);
  CHECK(lognormal.min_length == 64);
  CHECK(lognormal.max_length == 8192);
  CHECK(lognormal.mean == Approx(1024));
  CHECK(lognormal.sigma == Approx(1.5));
  const auto uniform = parse_length_distribution("uniform(min=16,max=512)");
  CHECK(uniform.kind == LengthDistribution::Kind::uniform);
  CHECK(uniform.max_length == 512);
  const auto fixed = parse_length_distribution("fixed(length=256)");
  CHECK(fixed.min_length == 256);
  CHECK(fixed.max_length == 256);
}

TEST_CASE("malformed length distribution specs name the key", "[config]") {
  for (const char* spec : {"lognormal", "lognormal(min=1,max=2)", "uniform(min=5,max=4)",
                           "uniform(min=0,max=4)", "fixed(length=-3)", "fixed(length=8,length=9)",
                           "poisson(mean=3)", "uniform(min=1,max=2,x=3)",
                           "lognormal(min=1,max=8,mean=abc,sigma=1)", "uniform(min=1;max=2)"}) {
    INFO(spec);
    REQUIRE_THROWS_WITH(parse_length_distribution(spec),
                        Contains("dataset.mock_length_distribution: ") && Contains(spec));
  }
}
