#pragma once
// What `dyncp-train --dry-run` adds to the validated settings: a preview of the first step's
// schedule on the real data and a per-rank memory estimate. Nothing here builds communicators
// or weights; the schedule is computed exactly as StepEngine computes it on every rank.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "data/sample.hpp"
#include "packing/schedule.hpp"
#include "train/memory_estimate.hpp"

namespace dyncp::train {

struct SchedulePreview {
  std::string scheduler;  // the packing scheduler the trainer would run
  std::string data;       // where the samples came from
  std::int64_t samples_in_source = 0;
  std::int64_t batch_size = 0;  // samples in the first global batch
  std::int64_t microbatches = 0;
  std::map<std::int64_t, std::int64_t> group_sizes;  // runtime group size -> groups in the step
  std::int64_t groups = 0;
  std::int64_t real_tokens = 0;    // sum of original lengths
  std::int64_t padded_tokens = 0;  // lengths padded for the groups the schedule chose
  std::int64_t pool_size = 1;
  std::string check_problem;              // packing::check_schedule's verdict; empty when valid
  double step_seconds = 0;                // cost model, the configured scheduler
  double pipeline_bubble_fraction = 0.0;  // of step_seconds, with pp > 1
  double static_cp_step_seconds = -1;     // dp_balanced on the static layout; < 0: cannot run
  double lower_bound_seconds = 0;
  packing::Schedule schedule;         // the previewed step, for the modelled GPU step
  std::vector<std::int64_t> lengths;  // its real lengths, by schedule id
};

// Draws the first global batch from `source` (data::Sampler with the recipe's settings), pads
// the lengths, runs the configured scheduler and checks its schedule. Data errors (a sample
// that fits no group) propagate as core::Error.
SchedulePreview preview_first_step(const config::ConfigContainer& config,
                                   const data::SampleSource& source);

// "cp1:12 cp2:3 cp4:1"
std::string format_group_histogram(const std::map<std::int64_t, std::int64_t>& group_sizes);

std::string format_schedule_preview(const SchedulePreview& preview);

// A duration in plain milliseconds ("373 ms", "12300 ms", "4.56 ms"; never an exponent).
std::string milliseconds(double seconds);

// The static-CP layout nearest to a dynamic-CP recipe, as overrides: the same world and
// max_seqlen_per_dp_cp_rank, the smallest cp that holds seq_length (the cap grows only when
// even cp = world cannot). Followed by a note on the layout it gives.
std::string suggest_static_layout(const config::ConfigContainer& config);

// One line per pipeline stage: its layers and memory per rank (parameter state, activations
// of the microbatches in flight, buffers); `largest` / `largest_estimate` receive the stage with
// the largest total. `microbatches` bounds the microbatches in flight (<= 0: not bounded).
std::string format_pipeline_stage_memory(const config::ConfigContainer& config,
                                         std::int64_t microbatches,
                                         MemoryEstimateInput* largest = nullptr,
                                         MemoryEstimate* largest_estimate = nullptr);

// Writes the dry-run report that follows the layout: the preview (or a note saying why it is
// skipped), the memory table and the modelled GPU step (train/step_model_report.hpp).
// `max_records`: how much of a not-yet-prepared data file to tokenize. For a dynamic-CP recipe it
// also prints suggest_static_layout. Returns false when the scheduler broke the schedule contract
// (a bug: exit 1).
bool write_dry_run_report(std::ostream& out, const config::ConfigContainer& config,
                          std::int64_t max_records = 4096);

}  // namespace dyncp::train
