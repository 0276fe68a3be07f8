// Pipeline rounds (packing/pipeline_rounds.hpp): every transfer's two ends meet in one round,
// each pass reads an input that has arrived, and ranks that block on every exchange until its
// peers have posted the matching halves (NCCL, MPI rendezvous) never wait forever.
#include "packing/pipeline_rounds.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

using namespace dyncp::packing;

namespace {

// One message: kind (0 activation, 1 gradient), microbatch, the receiver's chunk.
using Message = std::tuple<int, std::int64_t, std::int64_t>;

struct Half {
  bool send = false;
  std::int64_t peer = 0;
  Message message;
};

// A rank's blocking exchanges in order; each completes only when every half's counterpart is
// posted by its peer. Messages between two ranks match in order (one channel, as NCCL), and
// must be the same message at both ends.
using Exchanges = std::vector<std::vector<Half>>;

// Runs every rank's exchanges under that rule: true when all complete. `mismatch` is set when
// two halves that match by order are different messages.
bool completes(const std::vector<Exchanges>& ranks, bool& mismatch) {
  const auto n = static_cast<std::int64_t>(ranks.size());
  // Per ordered pair (from, to): the sends and receives in posting order, with (rank, exchange).
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<std::int64_t, Message>>>
      sends, receives;
  std::vector<std::vector<std::vector<std::size_t>>> counterpart_slot(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::size_t e = 0; e < ranks[static_cast<std::size_t>(r)].size(); ++e) {
      for (const Half& half : ranks[static_cast<std::size_t>(r)][e]) {
        auto& list = half.send ? sends[{r, half.peer}] : receives[{half.peer, r}];
        list.push_back({static_cast<std::int64_t>(e), half.message});
      }
    }
  }
  mismatch = false;
  // For each half: the exchange of the peer holding its counterpart (-1: none exists).
  std::vector<std::vector<std::vector<std::int64_t>>> partner(static_cast<std::size_t>(n));
  std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> sent_so_far, received_so_far;
  for (std::int64_t r = 0; r < n; ++r) {
    auto& mine = partner[static_cast<std::size_t>(r)];
    for (const auto& exchange : ranks[static_cast<std::size_t>(r)]) {
      mine.emplace_back();
      for (const Half& half : exchange) {
        const std::pair key = half.send ? std::pair{r, half.peer} : std::pair{half.peer, r};
        const std::size_t index = (half.send ? sent_so_far : received_so_far)[key]++;
        const auto& other = half.send ? receives[key] : sends[key];
        if (index >= other.size()) {
          mine.back().push_back(-1);
          continue;
        }
        if (other[index].second != half.message) mismatch = true;
        mine.back().push_back(other[index].first);
      }
    }
  }
  std::vector<std::size_t> at(static_cast<std::size_t>(n), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (std::int64_t r = 0; r < n; ++r) {
      auto& next = at[static_cast<std::size_t>(r)];
      const auto& exchanges = ranks[static_cast<std::size_t>(r)];
      if (next == exchanges.size()) continue;
      bool ready = true;
      const auto& halves = exchanges[next];
      for (std::size_t h = 0; h < halves.size(); ++h) {
        const std::int64_t needed = partner[static_cast<std::size_t>(r)][next][h];
        // The peer has posted it: it is at or past that exchange.
        if (needed < 0 ||
            static_cast<std::int64_t>(at[static_cast<std::size_t>(halves[h].peer)]) < needed)
          ready = false;
      }
      if (ready) {
        ++next;
        progressed = true;
      }
    }
  }
  for (std::int64_t r = 0; r < n; ++r)
    if (at[static_cast<std::size_t>(r)] != ranks[static_cast<std::size_t>(r)].size()) return false;
  return true;
}

// The plan's exchanges: per round, the forward direction, then the backward one.
std::vector<Exchanges> exchanges_of(const PipelinePlan& plan) {
  const std::int64_t pp = plan.stages;
  std::vector<Exchanges> ranks(static_cast<std::size_t>(pp));
  for (std::int64_t s = 0; s < pp; ++s) {
    for (const PipelineRound& round : plan.rounds[static_cast<std::size_t>(s)]) {
      std::vector<Half> forward, backward;
      const auto k = [&](const PipelineTransfer& t) { return t.chunk * pp + s; };
      if (round.send_activation.present())
        forward.push_back(
            {true,
             (s + 1) % pp,
             {0, round.send_activation.microbatch, (k(round.send_activation) + 1) / pp}});
      if (round.receive_activation.present())
        forward.push_back(
            {false,
             (s + pp - 1) % pp,
             {0, round.receive_activation.microbatch, round.receive_activation.chunk}});
      if (round.send_gradient.present())
        backward.push_back(
            {true,
             (s + pp - 1) % pp,
             {1, round.send_gradient.microbatch, (k(round.send_gradient) - 1) / pp}});
      if (round.receive_gradient.present())
        backward.push_back({false,
                            (s + 1) % pp,
                            {1, round.receive_gradient.microbatch, round.receive_gradient.chunk}});
      auto& mine = ranks[static_cast<std::size_t>(s)];
      if (!forward.empty()) mine.push_back(forward);
      if (!backward.empty()) mine.push_back(backward);
    }
  }
  return ranks;
}

// What a plan without rounds would do: receive right before the pass that reads the input,
// send right after the pass that made it, each transfer blocking on its own.
std::vector<Exchanges> naive_exchanges(std::int64_t pp, std::int64_t microbatches) {
  std::vector<Exchanges> ranks(static_cast<std::size_t>(pp));
  for (std::int64_t s = 0; s < pp; ++s) {
    auto& mine = ranks[static_cast<std::size_t>(s)];
    for (const PipelineAction& a : one_f_one_b_schedule(pp, s, microbatches)) {
      const bool forward = a.pass == PipelinePass::forward;
      if (forward && s > 0) mine.push_back({{false, s - 1, {0, a.microbatch, 0}}});
      if (!forward && s + 1 < pp) mine.push_back({{false, s + 1, {1, a.microbatch, 0}}});
      if (forward && s + 1 < pp) mine.push_back({{true, s + 1, {0, a.microbatch, 0}}});
      if (!forward && s > 0) mine.push_back({{true, s - 1, {1, a.microbatch, 0}}});
    }
  }
  return ranks;
}

}  // namespace

TEST_CASE("pipeline rounds: every transfer meets its receive and every input arrives first",
          "[packing][pipeline]") {
  for (const std::int64_t pp : {2, 3, 4, 8}) {
    for (const std::int64_t v : {1, 2, 3}) {
      for (std::int64_t m = 1; m <= 17; ++m) {
        if (!pipeline_microbatch_problem(pp, v, m).empty()) continue;
        for (const bool forward_only : {false, true}) {
          INFO("pp " << pp << " vpp " << v << " microbatches " << m << " forward only "
                     << forward_only);
          const PipelinePlan plan = plan_pipeline_rounds(pp, v, m, forward_only);
          REQUIRE(check_pipeline_plan(plan).empty());
          bool mismatch = false;
          REQUIRE(completes(exchanges_of(plan), mismatch));
          REQUIRE_FALSE(mismatch);
        }
      }
    }
  }
}

TEST_CASE("pipeline rounds: blocking transfers without rounds deadlock, with them they do not",
          "[packing][pipeline]") {
  // The check above bites: sending right after a pass and receiving right before one hangs
  // 1F1B as soon as two neighbours both send first.
  bool mismatch = false;
  CHECK_FALSE(completes(naive_exchanges(2, 4), mismatch));
  CHECK(completes(exchanges_of(plan_pipeline_rounds(2, 1, 4)), mismatch));
}

TEST_CASE("pipeline rounds: 1F1B takes 2 M + 2 (pp - 1) unit slots and holds pp microbatches",
          "[packing][pipeline]") {
  for (const std::int64_t pp : {2, 4}) {
    for (const std::int64_t m : {1, 3, 8}) {
      INFO("pp " << pp << " microbatches " << m);
      const PipelinePlan plan = plan_pipeline_rounds(pp, 1, m);
      CHECK(plan.num_rounds() == 2 * m + 2 * (pp - 1));
      // Stage 0 keeps its warm-up forwards and one more until their backwards; the last
      // stage the microbatch it runs and the next one's input, which arrives early.
      CHECK(peak_live_passes(plan, 0) == std::min(pp, m));
      CHECK(peak_live_passes(plan, pp - 1) == std::min<std::int64_t>(2, m));
    }
  }
  // Forward only: M + pp - 1 slots, each microbatch released after its forward.
  const PipelinePlan evaluation = plan_pipeline_rounds(4, 1, 6, true);
  CHECK(evaluation.num_rounds() == 6 + 3);
  CHECK(peak_live_passes(evaluation, 0) == 1);
}

TEST_CASE("pipeline rounds: interleaving passes activations round the ring of stages",
          "[packing][pipeline]") {
  const PipelinePlan plan = plan_pipeline_rounds(2, 2, 4);
  REQUIRE(check_pipeline_plan(plan).empty());
  // Stage 1's chunk 0 feeds stage 0's chunk 1: stage 0 receives activations for chunk 1 only.
  bool chunk_one_received = false;
  for (const PipelineRound& round : plan.rounds[0]) {
    if (!round.receive_activation.present()) continue;
    CHECK(round.receive_activation.chunk == 1);
    chunk_one_received = true;
  }
  CHECK(chunk_one_received);
  // The steady state runs a forward and the next backward in one slot: on stage 0 of pp 2, v 2,
  // M 8, the N - w = 16 - 4 pairs after the warm-up.
  const PipelinePlan longer = plan_pipeline_rounds(2, 2, 8);
  std::int64_t paired = 0;
  for (const PipelineRound& round : longer.rounds[0]) {
    if (round.num_passes < 2) continue;
    CHECK(round.passes[0].pass == PipelinePass::forward);
    CHECK(round.passes[1].pass == PipelinePass::backward);
    ++paired;
  }
  CHECK(paired == 12);
  // A broken plan is named: drop one receive.
  PipelinePlan broken = plan;
  for (PipelineRound& round : broken.rounds[1]) {
    if (round.receive_activation.present()) {
      round.receive_activation = {};
      break;
    }
  }
  CHECK_THAT(check_pipeline_plan(broken), Catch::Contains("no matching receive"));
}
