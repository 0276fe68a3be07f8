#pragma once
// The loop state a checkpoint stores in state.json, and its schema check: exactly these keys,
// integers where counts are (20.5 is refused, not truncated), no negative counter,
// skipped_steps <= iteration, an LR schedule LrSchedule accepts, the folder's iteration.
// Kept apart from the tensors (training_checkpoint.hpp) so that it can be fuzzed alone.

#include <cstdint>
#include <string>

#include "train/lr_schedule.hpp"

namespace dyncp::train {

struct LoopState {
  std::int64_t iteration = 0;  // optimizer steps taken
  std::int64_t consumed_samples = 0;
  std::int64_t epoch = 0;
  std::int64_t index_in_epoch = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t seed = 0;
  LrSchedule lr_schedule;         // the schedule the run that saved was following
  bool lr_schedule_saved = true;  // false for format 1, which did not store the schedule
  // state.json's format: 1 (no manifest, no schedule), 2 (one writer: model/ and
  // optimizer.safetensors), 3 (sharded: every rank's file and index.json).
  int format = 2;
};

// Parses and schema-checks state.json text (`where` names the file in errors); the iteration
// must be `expected_iteration`.
LoopState parse_loop_state(const std::string& text, const std::string& where,
                           std::int64_t expected_iteration);

// A format-1 state.json (written before checkpoint manifests and the saved LR schedule): the
// same counters and checks, no "lr_scheduler"; lr_schedule_saved is false.
LoopState parse_format1_loop_state(const std::string& text, const std::string& where,
                                   std::int64_t expected_iteration);

// state.json text of `state` (its format: 2 or 3).
std::string loop_state_json(const LoopState& state);

}  // namespace dyncp::train
