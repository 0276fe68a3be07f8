#pragma once
// A training checkpoint is layout-independent: full fp32 weights (an HF folder: config.json +
// model.safetensors), full fp32 Adam moments (optimizer.safetensors, tensors named
// "exp_avg.<hf name>" / "exp_avg_sq.<hf name>") and the loop state (state.json). Any layout
// (dp, cp, dynamic or static, EP) can load it: every rank reads the whole checkpoint and uses
// its part. Rank 0 writes; folders are published atomically by CheckpointStore.
//
//   <save>/iter_0000040/model/{config.json, model.safetensors}
//   <save>/iter_0000040/optimizer.safetensors
//   <save>/iter_0000040/state.json      {"iteration", "consumed_samples", "epoch",
//                                        "index_in_epoch", "skipped_steps", "seed", "format"}

#include <cstdint>
#include <filesystem>

#include "core/tensor.hpp"
#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::train {

struct LoopState {
  std::int64_t iteration = 0;  // optimizer steps taken
  std::int64_t consumed_samples = 0;
  std::int64_t epoch = 0;
  std::int64_t index_in_epoch = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t seed = 0;
};

// Writes the three parts into `folder` (which exists and is empty).
void write_training_checkpoint(const std::filesystem::path& folder,
                               const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state);

// Reads a checkpoint folder into the parameters and moments; returns the loop state. Data
// errors name the file for anything missing or malformed.
LoopState read_training_checkpoint(const std::filesystem::path& folder,
                                   const model::Qwen3MoeParameters& parameters,
                                   const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq);

}  // namespace dyncp::train
