#pragma once
// What every pipeline stage does, round by round, when a schedule (pipeline_schedule.hpp) runs
// on ranks that pass activations and gradients by point-to-point transfers (docs/dist.md
// "Pipeline schedules"). Pure: the same plan on every rank, testable without communication.
//
// A schedule orders each stage's passes but says nothing of when a transfer happens, and
// transfers that complete only when both ends are posted (NCCL send / recv, and MPI's for large
// messages) deadlock when two neighbours each send before they receive. So the transfers are
// planned in lockstep rounds:
//   - the passes are timed in unit slots: a pass runs one slot after the later of its stage's
//     previous slot and the pass on the neighbouring virtual stage that produces its input.
//     Interleaved 1F1B's steady state runs a forward and the next backward in one slot and
//     exchanges what both produced together, as Megatron's schedule does (its warm-up is long
//     enough for that): neighbours then meet once per forward + backward, whatever the two
//     passes' lengths. 1F1B keeps one pass per slot (Megatron's send_forward_recv_backward after
//     a forward, send_backward_recv_forward after a backward);
//   - after slot t every stage takes round t: each transfer produced in slot t is posted in
//     round t by its sender and its receiver (which keeps it until the pass that reads it);
//   - inside a round a stage exchanges first in the forward direction (the activation it sends
//     to the next stage, stage + 1 mod pp, and the one it receives from the previous), then in
//     the backward direction (the input gradient it sends back, the one it receives).
// Both ends of a transfer are in the same round and direction, and a stage runs at most one
// pass per slot, so between two ranks a direction carries at most one message per round:
// messages match in order (NCCL matches by call order), and no round waits on a later one.
//
// Virtual stage k = chunk x pp + stage (pipeline_split.hpp): an activation goes from k to k + 1
// (stage pp - 1's chunk c feeds stage 0's chunk c + 1), a gradient from k to k - 1.

#include <cstdint>
#include <string>
#include <vector>

#include "packing/pipeline_schedule.hpp"

namespace dyncp::packing {

// One microbatch's tensor crossing stages; `chunk` is the chunk of THIS stage whose pass sends
// it (a send) or reads it (a receive).
struct PipelineTransfer {
  std::int64_t microbatch = -1;  // -1: no transfer
  std::int64_t chunk = 0;

  bool present() const { return microbatch >= 0; }
  friend bool operator==(const PipelineTransfer&, const PipelineTransfer&) = default;
};

// One stage's slot and round.
struct PipelineRound {
  // The passes of the slot, in order: none, one, or (interleaved steady state) a forward and a
  // backward.
  int num_passes = 0;
  PipelineAction passes[2];
  // Forward direction: to the rank of stage + 1 (mod pp), from the rank of stage - 1.
  PipelineTransfer send_activation;     // the output of this slot's forward
  PipelineTransfer receive_activation;  // the input of a later forward here
  // Backward direction: to the rank of stage - 1 (mod pp), from the rank of stage + 1.
  PipelineTransfer send_gradient;     // the input gradient of this slot's backward
  PipelineTransfer receive_gradient;  // the output gradient of a later backward here
};

struct PipelinePlan {
  std::int64_t stages = 1;
  std::int64_t virtual_chunks = 1;
  std::int64_t microbatches = 0;
  bool forward_only = false;
  std::vector<std::vector<PipelineRound>> rounds;  // [stage][round]; every stage the same count

  std::int64_t num_rounds() const {
    return rounds.empty() ? 0 : static_cast<std::int64_t>(rounds.front().size());
  }
};

// The plan of pipeline_schedule(stages, virtual_chunks, s, microbatches) for every stage s, or
// with `forward_only` (held-out evaluation) of the forwards alone in the schedule's forward
// order. Throws a runtime error naming the rule for a microbatch count the schedule cannot take.
PipelinePlan plan_pipeline_rounds(std::int64_t stages, std::int64_t virtual_chunks,
                                  std::int64_t microbatches, bool forward_only = false);

// The forwards of the schedule alone, in its forward order (what evaluation runs).
std::vector<PipelineAction> forward_only_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                                  std::int64_t stage, std::int64_t microbatches);

// Every rule the executor relies on, as the first broken one ("" when none is): both ends of
// every transfer in the same round with the same microbatch and the chunks of neighbouring
// virtual stages; each pass's input received in an earlier round (or none needed: the
// embedding, the loss); each stage's passes are its schedule's, in order.
std::string check_pipeline_plan(const PipelinePlan& plan);

// Microbatches of `stage` whose activations are held at once at most (received or produced,
// until the backward that frees them), counting each (microbatch, chunk) once.
std::int64_t peak_live_passes(const PipelinePlan& plan, std::int64_t stage);

}  // namespace dyncp::packing
