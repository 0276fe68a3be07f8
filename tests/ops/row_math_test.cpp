#include "ops/row_math.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

using dyncp::ops::detail::exp_shifted;
using dyncp::ops::detail::fast_exp;

TEST_CASE("fast float exp is within a few ulp of std::exp and maps -inf to 0", "[ops][row_math]") {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double expected = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(fast_exp<float>(x) - expected) / expected);
  }
  CHECK(worst < 4 * std::numeric_limits<float>::epsilon());
  CHECK(fast_exp<float>(0.0f) == 1.0f);
  CHECK(fast_exp<float>(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(fast_exp<float>(-1000.0f) == 0.0f);
  // The vectorised row form (the path this CPU dispatches to) agrees with the scalar one, tail
  // included.
  std::vector<float> row(37);
  for (std::size_t j = 0; j < row.size(); ++j) row[j] = -3.0f + 0.25f * static_cast<float>(j);
  std::vector<float> expected = row;
  for (float& v : expected) v = fast_exp<float>(v - 1.5f);
  exp_shifted(row.data(), static_cast<std::int64_t>(row.size()), 1.5f);
  for (std::size_t j = 0; j < row.size(); ++j) CHECK(row[j] == Approx(expected[j]).epsilon(1e-6));
}
