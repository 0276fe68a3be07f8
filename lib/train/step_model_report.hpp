#pragma once
// The modelled GPU step of `--dry-run` (packing/step_model.hpp, docs/step-model.md) for a
// recipe: the step the dry run previewed on the real data (its slowest rank), or, without
// data, the nominal step in which every sample is seq_length tokens long. Modelled with the
// Gated DeltaNet kernel the recipe names (packing.step_model_deltanet_kernel) and, for a
// hybrid model, with the other design too, so that both are printed.

#include <cstdint>
#include <span>
#include <string>

#include "config/config_container.hpp"
#include "packing/schedule.hpp"
#include "packing/step_model.hpp"

namespace dyncp::train {

struct ModelledStep {
  std::string basis;  // which step and rank were modelled
  packing::StepModel model;
  packing::StepModelInput input;
};

// `schedule` / `lengths`: the first global batch's schedule and real lengths; null: nominal.
ModelledStep model_recipe_step(const config::ConfigContainer& config,
                               const packing::Schedule* schedule,
                               std::span<const std::int64_t> lengths,
                               const packing::StepModelParameters& parameters);

// The report: the basis, the table of the recipe's design and, for a hybrid model, the Gated
// DeltaNet rows, step time and MFU under both designs with their ratio.
std::string format_step_model_report(const config::ConfigContainer& config,
                                     const packing::Schedule* schedule,
                                     std::span<const std::int64_t> lengths);

}  // namespace dyncp::train
