// The fast default_dynamic_cp against the literal per-rank oracle, id for id.
#include <catch2/catch.hpp>

#include "core/rng.hpp"
#include "megatron_reference.hpp"
#include "packing/default_dynamic_cp.hpp"

using namespace dyncp;
using namespace dyncp::packing;

namespace {

struct Case {
  std::vector<std::int64_t> lengths;
  std::int64_t dp, cp, cap, min_cp;
};

// Seeded random case: pool 1..64 (a quarter not powers of two), lengths that need groups of
// every size, sometimes unaligned, sometimes many equal (ties).
Case random_case(std::uint64_t seed) {
  core::Rng rng(seed, core::RngPurpose::test);
  Case c;
  const bool power_of_two = rng.below(4) != 0;
  const std::int64_t pool = power_of_two ? (std::int64_t{1} << rng.below(7))
                                         : static_cast<std::int64_t>(3 + rng.below(60));
  c.cp = 1;
  while (c.cp * 2 <= pool && pool % (c.cp * 2) == 0 && rng.below(2) == 0) c.cp *= 2;
  c.dp = pool / c.cp;
  c.cap = std::int64_t{64} << rng.below(5);
  c.min_cp = 1;
  if (power_of_two && rng.below(4) == 0) c.min_cp = std::int64_t{1} << rng.below(3);
  if (c.min_cp > pool) c.min_cp = 1;
  std::int64_t largest_group = 1;
  while (largest_group * 2 <= pool) largest_group *= 2;
  const std::int64_t max_length = largest_group * c.cap;
  const auto n = static_cast<std::size_t>(1 + rng.below(seed % 4 == 0 ? 400 : 96));
  const std::int64_t quantum = rng.below(2) == 0 ? 1 : c.cap / 4;  // coarse lengths -> ties
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t length;
    if (rng.below(3) == 0) {
      length = 1 + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(max_length)));
    } else {
      length = std::min<std::int64_t>(
          max_length, 1 + static_cast<std::int64_t>(
                              std::exp(std::log(static_cast<double>(c.cap) / 2) + rng.normal())));
    }
    length = std::max<std::int64_t>(quantum, (length + quantum - 1) / quantum * quantum);
    c.lengths.push_back(std::min(length, max_length));
  }
  return c;
}

}  // namespace

TEST_CASE("default_dynamic_cp equals the literal algorithm on 3000 random batches", "[packing]") {
  int fallbacks = 0;
  for (std::uint64_t seed = 0; seed < 3000; ++seed) {
    const Case c = random_case(seed);
    SchedulerInput input{c.lengths, c.dp, c.cp, c.cap, c.min_cp};
    const Schedule fast = schedule_default_dynamic_cp(input);
    const auto expected =
        testing::ReferenceDynamicCp(c.lengths, c.dp * c.cp, c.cap, c.min_cp).run();
    INFO("seed " << seed << " dp " << c.dp << " cp " << c.cp << " cap " << c.cap << " min_cp "
                 << c.min_cp << " n " << c.lengths.size());
    REQUIRE(fast.rank_lists() == expected);
    for (std::int64_t m = 0; m < fast.num_microbatches(); ++m) {
      if (fast.groups_of(m).size() == 1 && fast.pool_size > 1 && !is_power_of_two(fast.pool_size))
        ++fallbacks;
    }
  }
  CHECK(fallbacks > 0);  // the full-pool fallback was exercised
}
