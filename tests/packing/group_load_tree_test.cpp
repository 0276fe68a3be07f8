#include "packing/group_load_tree.hpp"

#include <catch2/catch.hpp>

#include "core/rng.hpp"

using namespace dyncp;
using dyncp::packing::GroupLoadTree;

TEST_CASE("group load tree queries equal a left-to-right scan", "[packing]") {
  GroupLoadTree tree;
  tree.reserve(37);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    core::Rng rng(seed, core::RngPurpose::test);
    tree.clear();
    const auto count = static_cast<std::int64_t>(1 + rng.below(37));
    std::vector<std::int64_t> tokens;
    std::vector<double> load;
    for (std::int64_t i = 0; i < count; ++i) {
      tokens.push_back(static_cast<std::int64_t>(rng.below(20)));
      load.push_back(static_cast<double>(rng.below(10)));  // small range: many ties
      REQUIRE(tree.push(tokens.back(), load.back()) == i);
    }
    for (int update = 0; update < 5; ++update) {
      const auto slot = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(count)));
      tokens[static_cast<std::size_t>(slot)] += 3;
      load[static_cast<std::size_t>(slot)] += 1.0;
      tree.set(slot, tokens[static_cast<std::size_t>(slot)], load[static_cast<std::size_t>(slot)]);
    }
    for (std::int64_t max_tokens = 0; max_tokens < 25; max_tokens += 3) {
      const double w = static_cast<double>(rng.below(4));
      const double ceiling = static_cast<double>(rng.below(12));
      std::int64_t first = GroupLoadTree::none;
      std::int64_t least = GroupLoadTree::none;
      for (std::int64_t i = 0; i < count; ++i) {
        const auto k = static_cast<std::size_t>(i);
        if (tokens[k] > max_tokens) continue;
        if (first == GroupLoadTree::none && load[k] + w <= ceiling) first = i;
        if (least == GroupLoadTree::none || load[k] < load[static_cast<std::size_t>(least)]) {
          least = i;
        }
      }
      CHECK(tree.first_with_room_and_load(max_tokens, w, ceiling) == first);
      CHECK(tree.least_load_with_room(max_tokens) == least);
    }
    std::int64_t smallest = tokens[0];
    for (const auto t : tokens) smallest = std::min(smallest, t);
    CHECK(tree.min_tokens() == smallest);
  }
}
