// The distributed optimizer's division of state (parallel/optimizer_shards.hpp): pieces tile
// each kind's logical vector exactly once, differ in size by at most one, and map back to the
// flat buffer without losing or duplicating an element, for uneven sizes, more shards than
// elements and a kind without ranges.

#include "parallel/optimizer_shards.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

using namespace dyncp;
using parallel::ParameterRange;

namespace {

// Dense and expert ranges interleaved with gaps, of uneven sizes, two weight-decay classes.
parallel::ParameterPartition mixed_partition() {
  parallel::ParameterPartition partition;
  partition.ranges = {{0, 37, false, true}, {40, 23, true, true},    {64, 5, false, false},
                      {70, 50, true, true}, {128, 101, false, true}, {232, 1, false, false},
                      {240, 17, true, true}};
  for (const ParameterRange& range : partition.ranges)
    (range.is_expert ? partition.expert_elements : partition.dense_elements) += range.count;
  return partition;
}

// How often each flat element is owned over all shard indices of both kinds.
std::vector<int> coverage(const parallel::ParameterPartition& partition, int dense_shards,
                          int expert_shards, std::int64_t flat_size) {
  std::vector<int> owned(static_cast<std::size_t>(flat_size), 0);
  for (int d = 0; d < dense_shards; ++d) {
    for (int e = 0; e < expert_shards; ++e) {
      const auto shards =
          parallel::plan_optimizer_shards(partition, dense_shards, d, expert_shards, e);
      std::int64_t elements = 0;
      for (const ParameterRange& range : shards.owned_ranges) {
        // Count a dense piece only for e == 0 and an expert piece only for d == 0: each once.
        if ((range.is_expert && d == 0) || (!range.is_expert && e == 0)) {
          for (std::int64_t i = 0; i < range.count; ++i)
            ++owned[static_cast<std::size_t>(range.offset + i)];
        }
        elements += range.count;
      }
      CHECK(elements == shards.owned_elements);
      CHECK(shards.owned_elements == shards.dense.owned().count() + shards.expert.owned().count());
    }
  }
  return owned;
}

}  // namespace

TEST_CASE("shard pieces tile the vector and differ in size by at most one", "[parallel][shards]") {
  for (const std::int64_t total : {0, 1, 3, 5, 7, 13, 100, 1001}) {
    for (const int shards : {1, 2, 3, 4, 8, 16}) {
      INFO(total << " elements over " << shards << " shards");
      const std::int64_t largest = parallel::largest_shard_piece(total, shards);
      CHECK(largest == (total + shards - 1) / shards);
      std::int64_t next = 0;
      for (int i = 0; i < shards; ++i) {
        const parallel::ShardPiece piece = parallel::shard_piece(total, shards, i);
        CHECK(piece.begin == next);
        CHECK(piece.count() >= total / shards);
        CHECK(piece.count() <= largest);
        // The longer pieces come first.
        if (i > 0) CHECK(parallel::shard_piece(total, shards, i - 1).count() >= piece.count());
        next = piece.end;
      }
      CHECK(next == total);
    }
  }
  // More shards than elements: one element each, then empty pieces.
  CHECK(parallel::shard_piece(3, 8, 2).count() == 1);
  CHECK(parallel::shard_piece(3, 8, 3).count() == 0);
  CHECK(parallel::shard_piece(3, 8, 7).begin == 3);
}

TEST_CASE("every element of every range is owned exactly once", "[parallel][shards]") {
  const auto partition = mixed_partition();
  const std::int64_t flat_size = 260;
  for (const auto& [dense_shards, expert_shards] :
       {std::pair{1, 1}, std::pair{4, 2}, std::pair{3, 5}, std::pair{8, 4}, std::pair{300, 64}}) {
    INFO("dense over " << dense_shards << ", experts over " << expert_shards);
    const std::vector<int> owned = coverage(partition, dense_shards, expert_shards, flat_size);
    std::vector<int> expected(static_cast<std::size_t>(flat_size), 0);
    for (const ParameterRange& range : partition.ranges)
      for (std::int64_t i = 0; i < range.count; ++i)
        expected[static_cast<std::size_t>(range.offset + i)] = 1;
    CHECK(owned == expected);  // gaps between ranges are never owned
  }
}

TEST_CASE("owned ranges keep their range's kind and weight-decay class", "[parallel][shards]") {
  const auto partition = mixed_partition();
  for (int index = 0; index < 3; ++index) {
    const auto shards = parallel::plan_optimizer_shards(partition, 3, index, 2, index % 2);
    for (const ParameterRange& owned : shards.owned_ranges) {
      const auto source = std::find_if(
          partition.ranges.begin(), partition.ranges.end(), [&](const ParameterRange& range) {
            return owned.offset >= range.offset &&
                   owned.offset + owned.count <= range.offset + range.count;
          });
      REQUIRE(source != partition.ranges.end());  // a run never crosses a range boundary
      CHECK(source->is_expert == owned.is_expert);
      CHECK(source->weight_decay == owned.weight_decay);
    }
  }
  // 144 dense elements over 3 shards: piece 0 is logical [0, 48) = the range at 0 (37), the
  // range at 64 (5, no decay) and the first 6 of the range at 128; piece 2 is [96, 144) = the
  // last 47 of the range at 128 and the one element at 232 (no decay).
  const auto first = parallel::plan_optimizer_shards(partition, 3, 0, 1, 0);
  CHECK(first.dense.total() == 144);
  const std::vector<ParameterRange> first_dense(first.owned_ranges.begin(),
                                                first.owned_ranges.begin() + 3);
  REQUIRE(first.owned_ranges.size() == 3 + 3);  // then the whole expert kind (one shard)
  CHECK(first_dense[0].offset == 0);
  CHECK(first_dense[0].count == 37);
  CHECK(first_dense[1].offset == 64);
  CHECK(first_dense[1].count == 5);
  CHECK_FALSE(first_dense[1].weight_decay);
  CHECK(first_dense[2].offset == 128);
  CHECK(first_dense[2].count == 6);
  const auto last = parallel::plan_optimizer_shards(partition, 3, 2, 1, 0);
  REQUIRE(last.owned_ranges.size() >= 2);
  CHECK(last.owned_ranges[0].offset == 128 + 54);
  CHECK(last.owned_ranges[0].count == 47);
  CHECK(last.owned_ranges[1].offset == 232);
  CHECK(last.owned_ranges[1].count == 1);
  CHECK_FALSE(last.owned_ranges[1].weight_decay);
}

TEST_CASE("more shards than elements of a kind", "[parallel][shards]") {
  parallel::ParameterPartition partition;
  partition.ranges = {{0, 2, false, true}, {16, 1, true, true}, {32, 1, false, false}};
  partition.dense_elements = 3;
  partition.expert_elements = 1;
  std::int64_t dense_owned = 0;
  std::int64_t expert_owned = 0;
  for (int index = 0; index < 8; ++index) {
    const auto shards = parallel::plan_optimizer_shards(partition, 8, index, 4, index % 4);
    CHECK(shards.dense.largest_piece() == 1);
    CHECK(shards.dense.owned().count() == (index < 3 ? 1 : 0));
    CHECK(shards.expert.owned().count() == (index % 4 == 0 ? 1 : 0));
    dense_owned += shards.dense.owned().count();
    if (index < 4) expert_owned += shards.expert.owned().count();
  }
  CHECK(dense_owned == 3);
  CHECK(expert_owned == 1);
  CHECK(coverage(partition, 8, 4, 40) == [] {
    std::vector<int> expected(40, 0);
    expected[0] = expected[1] = expected[16] = expected[32] = 1;
    return expected;
  }());
}

TEST_CASE("a kind without ranges has empty pieces", "[parallel][shards]") {
  parallel::ParameterPartition partition;
  partition.ranges = {{0, 10, false, true}, {16, 6, false, false}};
  partition.dense_elements = 16;
  const auto shards = parallel::plan_optimizer_shards(partition, 4, 3, 4, 2);
  CHECK(shards.expert.total() == 0);
  CHECK(shards.expert.largest_piece() == 0);
  CHECK(shards.expert.owned().count() == 0);
  CHECK(shards.dense.owned().count() == 4);
  CHECK(shards.owned_elements == 4);
  REQUIRE(shards.owned_ranges.size() == 1);
  CHECK(shards.owned_ranges[0].offset == 18);
  CHECK(shards.owned_ranges[0].count == 4);
}

TEST_CASE("logical reads and writes cross range boundaries", "[parallel][shards]") {
  const auto partition = mixed_partition();
  const auto shards = parallel::plan_optimizer_shards(partition, 1, 0, 1, 0);
  std::vector<float> flat(260);
  std::iota(flat.begin(), flat.end(), 0.0f);
  // Dense logical [30, 50): flat 30..36, then 64..68, then 128..135.
  std::vector<float> out(20);
  shards.dense.read(flat.data(), 30, 50, out.data());
  std::vector<float> expected;
  for (int i = 30; i < 37; ++i) expected.push_back(static_cast<float>(i));
  for (int i = 64; i < 69; ++i) expected.push_back(static_cast<float>(i));
  for (int i = 128; i < 136; ++i) expected.push_back(static_cast<float>(i));
  CHECK(out == expected);
  std::vector<float> target(260, -1.0f);
  shards.dense.write(out.data(), 30, 50, target.data());
  for (std::size_t i = 0; i < target.size(); ++i) {
    const bool written = (i >= 30 && i < 37) || (i >= 64 && i < 69) || (i >= 128 && i < 136);
    CHECK(target[i] == (written ? flat[i] : -1.0f));
  }
}
