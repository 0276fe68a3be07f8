#pragma once
// Pipeline schedules as pure lists (docs/dist.md "Pipeline schedules"): what every stage runs,
// in order, for one step of M microbatches, and a simulation of their timing.
//
// 1F1B (Megatron's forward_backward_pipelining_without_interleaving): stage s of pp runs
// w = min(pp - s - 1, M) warm-up forwards, then M - w pairs (forward m + w, backward m), then
// the w cool-down backwards. At most pp - s microbatches are in flight on stage s.
//
// Interleaved 1F1B (with v = virtual chunks per stage, Megatron's schedule with microbatch groups
// of pp): the stage runs N = M v forward and N backward passes of (microbatch, chunk). Forward
// pass k is chunk (k mod pp v) / pp of microbatch (k / (pp v)) pp + k mod pp; backward pass k the
// same microbatch and chunk v - 1 - that chunk. Warm-up: all N when M = pp, else
// min(2 (pp - s - 1) + (v - 1) pp, N); then 1F1B pairs; then the cool-down. M must be a multiple
// of pp (the rule Megatron's schedule states; interleaved_microbatch_problem).
//
// Bubble with equal pass times (simulate_pipeline reproduces these; the tests check it):
//   1F1B        (pp - 1) / (M + pp - 1) of the step
//   interleaved (pp - 1) / (v M + pp - 1)

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dyncp::packing {

enum class PipelinePass { forward, backward };

struct PipelineAction {
  PipelinePass pass = PipelinePass::forward;
  std::int64_t microbatch = 0;
  std::int64_t chunk = 0;  // virtual chunk of the stage (0 without interleaving)

  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

// "" when the schedule can run M microbatches, else the rule it breaks.
std::string pipeline_microbatch_problem(std::int64_t stages, std::int64_t virtual_chunks,
                                        std::int64_t microbatches);

// The actions of `stage`, in order. Throws a runtime error naming the rule for a microbatch
// count the schedule cannot take.
std::vector<PipelineAction> one_f_one_b_schedule(std::int64_t stages, std::int64_t stage,
                                                 std::int64_t microbatches);
std::vector<PipelineAction> interleaved_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                                 std::int64_t stage, std::int64_t microbatches);
// 1F1B for virtual_chunks = 1, interleaved otherwise.
std::vector<PipelineAction> pipeline_schedule(std::int64_t stages, std::int64_t virtual_chunks,
                                              std::int64_t stage, std::int64_t microbatches);

// Microbatches the interleaved schedule runs for M: M rounded up to a multiple of pp (the
// padding microbatches are empty); M for 1F1B.
std::int64_t scheduled_microbatches(std::int64_t stages, std::int64_t virtual_chunks,
                                    std::int64_t microbatches);

struct PipelineTiming {
  double step_seconds = 0.0;     // the last stage's last pass ends
  double busy_seconds = 0.0;     // summed over stages
  double bubble_fraction = 0.0;  // 1 - busy / (stages x step)
  std::int64_t peak_in_flight =
      0;  // most (microbatch, chunk) forwards awaiting backward, any stage
};

// Times every stage's schedule: a forward of (m, chunk c) on stage s waits for the same
// microbatch's forward on the virtual stage before (c pp + s - 1), a backward for the one after,
// each plus `transfer_seconds`; a stage runs its passes in order, one at a time.
// forward_seconds / backward_seconds (microbatch, chunk) give a pass's length on any stage.
PipelineTiming simulate_pipeline(
    std::int64_t stages, std::int64_t virtual_chunks, std::int64_t microbatches,
    const std::function<double(std::int64_t, std::int64_t)>& forward_seconds,
    const std::function<double(std::int64_t, std::int64_t)>& backward_seconds,
    double transfer_seconds = 0.0);

// The formulas above.
double modelled_bubble_fraction(std::int64_t stages, std::int64_t virtual_chunks,
                                std::int64_t microbatches);

}  // namespace dyncp::packing
