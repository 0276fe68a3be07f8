#include "packing/packed_seq_params.hpp"

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "packing/alignment.hpp"
#include "packing/default_dynamic_cp.hpp"

using namespace dyncp;
using namespace dyncp::packing;

namespace {
bool same(const TokenRange& a, std::int64_t begin, std::int64_t end, std::int64_t sequence,
          std::int64_t position) {
  return a.begin == begin && a.end == end && a.sequence == sequence && a.first_position == position;
}
}  // namespace

TEST_CASE("the header's worked example", "[packing]") {
  // Pool of 8, one microbatch: sample 2 on ranks 0..3, sample 3 on ranks 4..5, and samples
  // 0 and 1 on the group of size 2 at rank 6.
  Schedule schedule;
  schedule.pool_size = 8;
  schedule.begin_microbatch();
  schedule.add_group(0, 4, std::vector<std::int64_t>{2});
  schedule.add_group(4, 2, std::vector<std::int64_t>{3});
  schedule.add_group(6, 2, std::vector<std::int64_t>{0, 1});
  schedule.end_microbatch();
  const std::vector<std::int64_t> original = {5, 3, 16, 4};
  const std::vector<std::int64_t> padded = {8, 4, 16, 4};
  const auto rank7 = make_packed_seq_params(schedule, 0, 7, original, padded);
  CHECK(rank7.cu_seqlens == std::vector<std::int64_t>{0, 5, 8});
  CHECK(rank7.cu_seqlens_padded == std::vector<std::int64_t>{0, 8, 12});
  CHECK(rank7.max_seqlen == 8);
  CHECK(rank7.group_start_rank == 6);
  CHECK(rank7.group_size == 2);
  CHECK(rank7.rank_in_group == 1);
  CHECK(rank7.local_num_tokens == 6);
  REQUIRE(rank7.local_ranges.size() == 2);
  CHECK(same(rank7.local_ranges[0], 2, 6, 0, 2));
  CHECK(same(rank7.local_ranges[1], 9, 11, 1, 1));
  const auto rank6 = make_packed_seq_params(schedule, 0, 6, original, padded);
  REQUIRE(rank6.local_ranges.size() == 4);
  CHECK(same(rank6.local_ranges[0], 0, 2, 0, 0));
  CHECK(same(rank6.local_ranges[1], 6, 8, 0, 6));
  CHECK(same(rank6.local_ranges[2], 8, 9, 1, 0));
  CHECK(same(rank6.local_ranges[3], 11, 12, 1, 3));
  // Rank 4 (k = 0) of the group at 4 holds sample 3 (4 tokens): chunks 0 and 3.
  const auto rank4 = make_packed_seq_params(schedule, 0, 4, original, padded);
  REQUIRE(rank4.local_ranges.size() == 2);
  CHECK(same(rank4.local_ranges[0], 0, 1, 0, 0));
  CHECK(same(rank4.local_ranges[1], 3, 4, 0, 3));
  // A group of 4 on 16 tokens: rank 2 keeps chunks 2 and 5 of 8 (2 tokens each).
  const auto rank2 = make_packed_seq_params(schedule, 0, 2, original, padded);
  REQUIRE(rank2.local_ranges.size() == 2);
  CHECK(same(rank2.local_ranges[0], 4, 6, 0, 4));
  CHECK(same(rank2.local_ranges[1], 10, 12, 0, 10));
}

TEST_CASE("zigzag shards of a group tile every sequence exactly once", "[packing]") {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    const std::int64_t pool = std::int64_t{1} << rng.below(6);
    const std::int64_t multiple = alignment_multiple({pool, 1, true});
    std::vector<std::int64_t> original, padded;
    const auto n = 1 + rng.below(40);
    for (std::uint64_t i = 0; i < n; ++i) {
      original.push_back(1 + static_cast<std::int64_t>(rng.below(300)));
      padded.push_back(padded_length(original.back(), multiple));
    }
    const Schedule schedule = schedule_default_dynamic_cp({padded, pool, 1, 512});
    for (std::int64_t m = 0; m < schedule.num_microbatches(); ++m) {
      for (const auto& group : schedule.groups_of(m)) {
        std::int64_t total = 0;
        for (auto id : schedule.ids_of(group)) total += padded[static_cast<std::size_t>(id)];
        std::vector<int> owners(static_cast<std::size_t>(total), 0);
        std::int64_t previous_local = -1;
        for (std::int64_t r = group.start_rank; r < group.start_rank + group.size; ++r) {
          const auto params = make_packed_seq_params(schedule, m, r, original, padded);
          std::int64_t local = 0;
          for (const auto& range : params.local_ranges) {
            // first_position is the offset inside its sequence
            REQUIRE(range.first_position ==
                    range.begin -
                        params.cu_seqlens_padded[static_cast<std::size_t>(range.sequence)]);
            for (auto t = range.begin; t < range.end; ++t) ++owners[static_cast<std::size_t>(t)];
            local += range.end - range.begin;
          }
          REQUIRE(local == params.local_num_tokens);
          if (previous_local >= 0) REQUIRE(local == previous_local);  // balanced tokens
          previous_local = local;
        }
        for (const int count : owners) REQUIRE(count == 1);
      }
    }
  }
}

TEST_CASE("lengths the group cannot split are data errors naming the sample", "[packing]") {
  Schedule schedule;
  schedule.pool_size = 2;
  schedule.begin_microbatch();
  schedule.add_group(0, 2, std::vector<std::int64_t>{0});
  schedule.end_microbatch();
  const std::vector<std::int64_t> original = {6}, padded = {6}, too_short = {7};
  CHECK_THROWS_WITH(make_packed_seq_params(schedule, 0, 0, original, padded),
                    Catch::Contains("sample 0") && Catch::Contains("multiple of 2 x group size"));
  CHECK_THROWS_WITH(make_packed_seq_params(schedule, 0, 0, too_short, padded),
                    Catch::Contains("must lie in [1, padded length 6]"));
}
