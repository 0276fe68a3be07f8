#include "packing/pipeline_rounds.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.hpp"

namespace dyncp::packing {

namespace {

// Slot of every (pass, microbatch, virtual stage), -1 until timed.
class PassSlots {
 public:
  PassSlots(std::int64_t microbatches, std::int64_t virtual_stages)
      : microbatches_(microbatches),
        virtual_stages_(virtual_stages),
        slots_(static_cast<std::size_t>(2 * microbatches * virtual_stages), -1) {}
  std::int64_t& at(PipelinePass pass, std::int64_t microbatch, std::int64_t virtual_stage) {
    const std::int64_t kind = pass == PipelinePass::backward ? 1 : 0;
    return slots_[static_cast<std::size_t>((kind * microbatches_ + microbatch) * virtual_stages_ +
                                           virtual_stage)];
  }

 private:
  std::int64_t microbatches_;
  std::int64_t virtual_stages_;
  std::vector<std::int64_t> slots_;
};

// The slot in which the pass producing `action`'s input ran, -1 when it has not been timed, or
// `none` when the input needs no other pass (the embedding's forward).
constexpr std::int64_t none = -2;
std::int64_t producer_slot(PassSlots& slots, const PipelineAction& action,
                           std::int64_t virtual_stage, std::int64_t virtual_stages) {
  if (action.pass == PipelinePass::forward) {
    return virtual_stage == 0
               ? none
               : slots.at(PipelinePass::forward, action.microbatch, virtual_stage - 1);
  }
  // The last virtual stage's backward starts from its own forward's loss.
  return virtual_stage + 1 < virtual_stages
             ? slots.at(PipelinePass::backward, action.microbatch, virtual_stage + 1)
             : slots.at(PipelinePass::forward, action.microbatch, virtual_stage);
}

void place_transfers(PipelinePlan& plan, std::int64_t stage, std::int64_t round,
                     const PipelineAction& action) {
  const std::int64_t pp = plan.stages;
  const std::int64_t virtual_stages = pp * plan.virtual_chunks;
  const std::int64_t k = action.chunk * pp + stage;
  auto& rounds = plan.rounds;
  const auto at = [&](std::int64_t s) -> PipelineRound& {
    return rounds[static_cast<std::size_t>(s)][static_cast<std::size_t>(round)];
  };
  if (action.pass == PipelinePass::forward && k + 1 < virtual_stages) {
    PipelineRound& receiver = at((stage + 1) % pp);
    DYNCP_CHECK(!receiver.receive_activation.present(),
                "a stage receives one activation per round");
    at(stage).send_activation = {action.microbatch, action.chunk};
    receiver.receive_activation = {action.microbatch, (k + 1) / pp};
  } else if (action.pass == PipelinePass::backward && k > 0) {
    PipelineRound& receiver = at((stage + pp - 1) % pp);
    DYNCP_CHECK(!receiver.receive_gradient.present(), "a stage receives one gradient per round");
    at(stage).send_gradient = {action.microbatch, action.chunk};
    receiver.receive_gradient = {action.microbatch, (k - 1) / pp};
  }
}

}  // namespace

std::vector<PipelineAction> forward_only_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                                  std::int64_t stage, std::int64_t microbatches) {
  std::vector<PipelineAction> forwards;
  for (const PipelineAction& action :
       pipeline_schedule(stages, virtual_chunks, stage, microbatches))
    if (action.pass == PipelinePass::forward) forwards.push_back(action);
  return forwards;
}

namespace {

// A stage's passes grouped into slots: one pass each, or (interleaved, not forward only) each
// steady-state forward with the backward after it. The list is w warm-up forwards, N - w
// (forward, backward) pairs and w cool-down backwards (pipeline_schedule.hpp): with pairs the
// leading forwards are w + 1, without (w = N) they are all N.
std::vector<std::vector<PipelineAction>> slot_units(const std::vector<PipelineAction>& list,
                                                    bool pair_steady_state) {
  std::size_t forwards = 0, leading = 0;
  for (const PipelineAction& action : list) forwards += action.pass == PipelinePass::forward;
  while (leading < list.size() && list[leading].pass == PipelinePass::forward) ++leading;
  const bool paired = pair_steady_state && leading < forwards;
  const std::size_t first_pair = leading - 1;
  const std::size_t pairs = paired ? forwards - first_pair : 0;
  std::vector<std::vector<PipelineAction>> units;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (paired && i >= first_pair && i < first_pair + 2 * pairs) {
      units.push_back({list[i], list[i + 1]});
      ++i;
    } else {
      units.push_back({list[i]});
    }
  }
  return units;
}

}  // namespace

PipelinePlan plan_pipeline_rounds(std::int64_t stages, std::int64_t virtual_chunks,
                                  std::int64_t microbatches, bool forward_only) {
  PipelinePlan plan;
  plan.stages = stages;
  plan.virtual_chunks = virtual_chunks;
  plan.microbatches = microbatches;
  plan.forward_only = forward_only;
  const std::int64_t pp = stages;
  const std::int64_t virtual_stages = pp * virtual_chunks;
  std::vector<std::vector<std::vector<PipelineAction>>> units;  // [stage][slot unit][pass]
  std::size_t remaining = 0;
  for (std::int64_t s = 0; s < pp; ++s) {
    units.push_back(slot_units(forward_only
                                   ? forward_only_schedule(pp, virtual_chunks, s, microbatches)
                                   : pipeline_schedule(pp, virtual_chunks, s, microbatches),
                               virtual_chunks > 1 && !forward_only));
    remaining += units.back().size();
  }
  // Unit slots, as early as the stage's order and the producers allow.
  PassSlots slots(microbatches, virtual_stages);
  std::vector<std::size_t> cursor(static_cast<std::size_t>(pp), 0);
  std::vector<std::int64_t> last(static_cast<std::size_t>(pp), -1);
  while (remaining > 0) {
    bool progressed = false;
    for (std::int64_t s = 0; s < pp; ++s) {
      const auto& stage_units = units[static_cast<std::size_t>(s)];
      auto& next = cursor[static_cast<std::size_t>(s)];
      auto& previous = last[static_cast<std::size_t>(s)];
      for (; next < stage_units.size(); ++next, --remaining, progressed = true) {
        std::int64_t ready = previous + 1;
        bool waiting = false;
        for (const PipelineAction& action : stage_units[next]) {
          const std::int64_t k = action.chunk * pp + s;
          // A last virtual stage's backward paired with its own forward reads that forward's
          // loss inside the slot.
          const bool own_forward = action.pass == PipelinePass::backward &&
                                   k + 1 == virtual_stages &&
                                   stage_units[next].front().microbatch == action.microbatch &&
                                   stage_units[next].front().pass == PipelinePass::forward &&
                                   stage_units[next].front().chunk == action.chunk;
          if (own_forward) continue;
          const std::int64_t producer = producer_slot(slots, action, k, virtual_stages);
          if (producer == -1) waiting = true;
          if (producer >= 0) ready = std::max(ready, producer + 1);
        }
        if (waiting) break;
        previous = ready;
        for (const PipelineAction& action : stage_units[next])
          slots.at(action.pass, action.microbatch, action.chunk * pp + s) = previous;
      }
    }
    if (!progressed) core::throw_runtime_error("pipeline rounds: the schedule deadlocks (a bug)");
  }
  const std::int64_t num_rounds = *std::max_element(last.begin(), last.end()) + 1;
  plan.rounds.assign(static_cast<std::size_t>(pp),
                     std::vector<PipelineRound>(static_cast<std::size_t>(num_rounds)));
  for (std::int64_t s = 0; s < pp; ++s) {
    for (const auto& unit : units[static_cast<std::size_t>(s)]) {
      for (const PipelineAction& action : unit) {
        const std::int64_t round = slots.at(action.pass, action.microbatch, action.chunk * pp + s);
        PipelineRound& here =
            plan.rounds[static_cast<std::size_t>(s)][static_cast<std::size_t>(round)];
        here.passes[here.num_passes++] = action;
        place_transfers(plan, s, round, action);
      }
    }
  }
  return plan;
}

namespace {

std::string describe(const char* what, std::int64_t stage, std::int64_t round,
                     const PipelineTransfer& transfer) {
  return std::string(what) + " of microbatch " + std::to_string(transfer.microbatch) + " chunk " +
         std::to_string(transfer.chunk) + " at stage " + std::to_string(stage) + " round " +
         std::to_string(round);
}

// Both ends of every transfer of one direction in the same round, with neighbouring chunks.
std::string check_matching(const PipelinePlan& plan, bool activations) {
  const std::int64_t pp = plan.stages;
  for (std::int64_t s = 0; s < pp; ++s) {
    const std::int64_t peer = activations ? (s + 1) % pp : (s + pp - 1) % pp;
    for (std::int64_t t = 0; t < plan.num_rounds(); ++t) {
      const PipelineRound& here =
          plan.rounds[static_cast<std::size_t>(s)][static_cast<std::size_t>(t)];
      const PipelineRound& there =
          plan.rounds[static_cast<std::size_t>(peer)][static_cast<std::size_t>(t)];
      const PipelineTransfer& sent = activations ? here.send_activation : here.send_gradient;
      const PipelineTransfer& received =
          activations ? there.receive_activation : there.receive_gradient;
      const std::int64_t k = sent.chunk * pp + s;
      const std::int64_t expected_chunk = activations ? (k + 1) / pp : (k - 1) / pp;
      if (sent.present() &&
          (received.microbatch != sent.microbatch || received.chunk != expected_chunk))
        return describe(activations ? "activation" : "gradient", s, t, sent) +
               " has no matching receive at stage " + std::to_string(peer);
      const PipelineTransfer& mine = activations ? here.receive_activation : here.receive_gradient;
      const std::int64_t source = activations ? (s + pp - 1) % pp : (s + 1) % pp;
      const PipelineTransfer& theirs =
          activations ? plan.rounds[static_cast<std::size_t>(source)][static_cast<std::size_t>(t)]
                            .send_activation
                      : plan.rounds[static_cast<std::size_t>(source)][static_cast<std::size_t>(t)]
                            .send_gradient;
      if (mine.present() && theirs.microbatch != mine.microbatch)
        return describe(activations ? "received activation" : "received gradient", s, t, mine) +
               " was not sent in that round";
    }
  }
  return "";
}

// Each pass's input arrived in an earlier round, once; each stage runs its schedule in order.
std::string check_inputs(const PipelinePlan& plan) {
  const std::int64_t pp = plan.stages;
  const std::int64_t virtual_stages = pp * plan.virtual_chunks;
  for (std::int64_t s = 0; s < pp; ++s) {
    const auto& rounds = plan.rounds[static_cast<std::size_t>(s)];
    std::set<std::pair<std::int64_t, std::int64_t>> activations, gradients;
    std::vector<PipelineAction> passes;
    for (std::int64_t t = 0; t < plan.num_rounds(); ++t) {
      const PipelineRound& round = rounds[static_cast<std::size_t>(t)];
      for (int p = 0; p < round.num_passes; ++p) {
        const PipelineAction& a = round.passes[p];
        passes.push_back(a);
        const std::int64_t k = a.chunk * pp + s;
        const bool forward = a.pass == PipelinePass::forward;
        const bool needs_input = forward ? k > 0 : k + 1 < virtual_stages;
        auto& arrived = forward ? activations : gradients;
        if (needs_input && arrived.erase({a.microbatch, a.chunk}) != 1)
          return std::string(forward ? "forward" : "backward") + " of microbatch " +
                 std::to_string(a.microbatch) + " chunk " + std::to_string(a.chunk) + " at stage " +
                 std::to_string(s) + " round " + std::to_string(t) +
                 " runs before its input arrives";
      }
      // Received after this round's pass: read by a later one.
      for (const auto& [transfer, arrived] : {std::pair{round.receive_activation, &activations},
                                              std::pair{round.receive_gradient, &gradients}}) {
        if (transfer.present() && !arrived->insert({transfer.microbatch, transfer.chunk}).second)
          return describe("a second receive", s, t, transfer);
      }
    }
    if (!activations.empty() || !gradients.empty())
      return "stage " + std::to_string(s) + " receives inputs no pass reads";
    const auto expected = plan.forward_only
                              ? forward_only_schedule(pp, plan.virtual_chunks, s, plan.microbatches)
                              : pipeline_schedule(pp, plan.virtual_chunks, s, plan.microbatches);
    if (passes != expected)
      return "stage " + std::to_string(s) + " does not run its schedule's passes in order";
  }
  return "";
}

}  // namespace

std::string check_pipeline_plan(const PipelinePlan& plan) {
  if (static_cast<std::int64_t>(plan.rounds.size()) != plan.stages) return "one list per stage";
  for (const auto& rounds : plan.rounds)
    if (static_cast<std::int64_t>(rounds.size()) != plan.num_rounds())
      return "every stage takes the same rounds";
  for (const bool activations : {true, false}) {
    std::string problem = check_matching(plan, activations);
    if (!problem.empty()) return problem;
  }
  return check_inputs(plan);
}

std::int64_t peak_live_passes(const PipelinePlan& plan, std::int64_t stage) {
  std::set<std::pair<std::int64_t, std::int64_t>> live;
  std::int64_t peak = 0;
  for (const PipelineRound& round : plan.rounds.at(static_cast<std::size_t>(stage))) {
    for (int p = 0; p < round.num_passes; ++p) {
      const PipelineAction& pass = round.passes[p];
      const std::pair key{pass.microbatch, pass.chunk};
      if (pass.pass == PipelinePass::forward) live.insert(key);
      peak = std::max(peak, static_cast<std::int64_t>(live.size()));
      if (pass.pass == PipelinePass::backward || plan.forward_only) live.erase(key);
    }
    if (round.receive_activation.present()) {
      live.insert({round.receive_activation.microbatch, round.receive_activation.chunk});
      peak = std::max(peak, static_cast<std::int64_t>(live.size()));
    }
  }
  return peak;
}

}  // namespace dyncp::packing
