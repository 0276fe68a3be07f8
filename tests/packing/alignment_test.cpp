#include "packing/alignment.hpp"

#include <catch2/catch.hpp>

#include "core/error.hpp"

using namespace dyncp::packing;

TEST_CASE("alignment multiple per layout", "[packing]") {
  CHECK(alignment_multiple({2, 4, true}) == 16);            // dynamic CP: 2 * dp * cp
  CHECK(alignment_multiple({2, 4, false}) == 8);            // static CP: 2 * cp
  CHECK(alignment_multiple({8, 1, false}) == 1);            // no CP
  CHECK(alignment_multiple({2, 4, true, 2, true}) == 32);   // sequence parallel: x tp
  CHECK(alignment_multiple({2, 4, true, 2, false}) == 16);  // tp without SP: unchanged
  CHECK_THROWS_WITH(alignment_multiple({0, 4, true}), Catch::Contains("data_parallel_size"));
}

TEST_CASE("padding rounds up to the multiple and folding reports the padded length", "[packing]") {
  CHECK(padded_length(1, 16) == 16);
  CHECK(padded_length(16, 16) == 16);
  CHECK(padded_length(17, 16) == 32);
  const auto kept = align_sequence(17, 16, false);
  CHECK(kept.original == 17);
  CHECK(kept.padded == 32);
  const auto folded = align_sequence(17, 16, true);
  CHECK(folded.original == 32);
  CHECK(folded.padded == 32);
  CHECK_THROWS_AS(padded_length(0, 16), dyncp::core::Error);
  CHECK_THROWS_AS(padded_length(5, 0), dyncp::core::Error);
}
