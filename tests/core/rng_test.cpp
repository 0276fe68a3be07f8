#include "core/rng.hpp"

#include <catch2/catch.hpp>

using dyncp::core::random_bits;
using dyncp::core::Rng;
using dyncp::core::RngPurpose;

TEST_CASE("random_bits is a pure function of its four inputs", "[core][rng]") {
  CHECK(random_bits(7, RngPurpose::test, 3, 11) == random_bits(7, RngPurpose::test, 3, 11));
  CHECK(random_bits(7, RngPurpose::test, 3, 11) != random_bits(8, RngPurpose::test, 3, 11));
  CHECK(random_bits(7, RngPurpose::test, 3, 11) != random_bits(7, RngPurpose::weight_init, 3, 11));
  CHECK(random_bits(7, RngPurpose::test, 3, 11) != random_bits(7, RngPurpose::test, 4, 11));
  CHECK(random_bits(7, RngPurpose::test, 3, 11) != random_bits(7, RngPurpose::test, 3, 12));
}

TEST_CASE("Rng streams replay exactly and have sane moments", "[core][rng]") {
  Rng a(42, RngPurpose::test, 5);
  Rng b(42, RngPurpose::test, 5);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = a.normal();
    REQUIRE(x == b.normal());
    sum += x;
    sum_sq += x * x;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum_sq / n - 1.0) < 0.02);
}

TEST_CASE("Rng::below is in range and covers every value", "[core][rng]") {
  Rng rng(1, RngPurpose::test);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const auto v = rng.below(7);
    REQUIRE(v < 7);
    ++seen[v];
  }
  for (int count : seen) CHECK(count > 800);
}
