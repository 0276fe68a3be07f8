// The vocabulary-parallel cross-entropy against the whole-vocabulary one: every world rank is one
// TP rank holding its vocabulary shard; the per-token loss and each shard's gradient match the
// reference (double precision, all columns on one rank) to fp32 round-off, the logits are never
// gathered (three all-reduces of one float per token), and an indivisible vocabulary is refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../dist/mpi_test_world.hpp"
#include "core/error.hpp"
#include "parallel/vocab_parallel_cross_entropy.hpp"

using namespace dyncp;

namespace {

// The same logits on every rank, spread enough that the max matters.
float logit_at(std::size_t token, std::size_t column) {
  return 6.0f * std::sin(0.37f * static_cast<float>(token * 131 + column * 17 + 3));
}

}  // namespace

TEST_CASE("vocab-parallel cross-entropy: the loss and gradients of the whole vocabulary",
          "[parallel][mpi][tp]") {
  dist::Comm& world = dist::testing::test_world();
  const int tp = world.size();
  constexpr std::size_t tokens = 37;
  const std::int64_t vocab = 24 * tp;
  const parallel::VocabShard shard = parallel::vocab_shard_of(vocab, tp, world.rank());
  REQUIRE(shard.count == 24);
  REQUIRE(shard.first == 24 * world.rank());

  std::vector<std::int64_t> targets(tokens);
  for (std::size_t t = 0; t < tokens; ++t) {
    targets[t] = t % 7 == 3 ? -1 : static_cast<std::int64_t>((t * 29 + 5) % vocab);
  }
  const auto width = static_cast<std::size_t>(shard.count);
  std::vector<float> logits(tokens * width);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t v = 0; v < width; ++v) {
      logits[t * width + v] = logit_at(t, static_cast<std::size_t>(shard.first) + v);
    }
  }
  std::vector<float> grad(logits.size());
  const dist::CommCounters before = world.counters();
  const std::vector<float> loss =
      parallel::vocab_parallel_cross_entropy(world, logits, targets, shard, grad);
  const dist::CommCounters moved = dist::counters_difference(world.counters(), before);
  CHECK(moved.total().calls == 3);
  CHECK(moved[dist::CommOp::all_reduce].calls == 3);

  for (std::size_t t = 0; t < tokens; ++t) {
    INFO("token " << t);
    if (targets[t] < 0) {
      CHECK(loss[t] == 0.0f);
      for (std::size_t v = 0; v < width; ++v) CHECK(grad[t * width + v] == 0.0f);
      continue;
    }
    double maximum = -1e30;
    for (std::int64_t v = 0; v < vocab; ++v) {
      maximum = std::max(maximum, static_cast<double>(logit_at(t, static_cast<std::size_t>(v))));
    }
    double sum = 0.0;
    for (std::int64_t v = 0; v < vocab; ++v) {
      sum += std::exp(static_cast<double>(logit_at(t, static_cast<std::size_t>(v))) - maximum);
    }
    const double expected = std::log(sum) + maximum -
                            static_cast<double>(logit_at(t, static_cast<std::size_t>(targets[t])));
    CHECK(std::abs(loss[t] - expected) <= 1e-6 * std::max(1.0, std::abs(expected)));
    for (std::size_t v = 0; v < width; ++v) {
      const std::int64_t id = shard.first + static_cast<std::int64_t>(v);
      const double probability =
          std::exp(static_cast<double>(logit_at(t, static_cast<std::size_t>(id))) - maximum) / sum;
      const double want = probability - (id == targets[t] ? 1.0 : 0.0);
      CHECK(std::abs(grad[t * width + v] - want) <= 1e-6);
    }
  }
}

TEST_CASE("vocab-parallel cross-entropy: an indivisible vocabulary and bad labels are refused",
          "[parallel][mpi][tp]") {
  REQUIRE_THROWS_WITH(parallel::vocab_shard_of(15, 2, 0),
                      Catch::Contains("model.vocab_size: 15: must be divisible by "
                                      "tensor_model_parallel_size 2"));
  dist::Comm& world = dist::testing::test_world();
  const parallel::VocabShard shard = parallel::vocab_shard_of(4 * world.size(), world.size(), 0);
  std::vector<float> logits(4, 0.0f);
  std::vector<float> grad(4);
  const std::vector<std::int64_t> targets = {4 * world.size()};
  // Checked before any collective, so every rank throws alike.
  REQUIRE_THROWS_WITH(parallel::vocab_parallel_cross_entropy(world, logits, targets, shard, grad),
                      Catch::Contains("outside the vocabulary"));
}
