#pragma once
// A training checkpoint is layout-independent: full fp32 weights (an HF folder: config.json +
// model.safetensors), full fp32 Adam moments (optimizer.safetensors, tensors named
// "exp_avg.<hf name>" / "exp_avg_sq.<hf name>", HF order) and the loop state (state.json).
// Any layout (dp, cp, dynamic or static, EP) can load it: every rank reads the tensors it
// holds (under EP only its own experts, under tensor parallelism only its pieces). Rank 0
// writes; under EP its expert-parallel group rebuilds every expert for it one layer at a time,
// and under tensor parallelism its TP group (and the expert-TP groups of its EP group) sum
// their pieces into one whole tensor at a time (model/whole_model_tensors.hpp,
// parallel/whole_model_gathers.hpp). Folders are published atomically by CheckpointStore.
//
//   <save>/iter_0000040/model/{config.json, model.safetensors}
//   <save>/iter_0000040/optimizer.safetensors
//   <save>/iter_0000040/state.json      {"format", "iteration", "consumed_samples", "epoch",
//                                        "index_in_epoch", "skipped_steps", "seed",
//                                        "lr_scheduler": {"max_lr", "min_lr",
//                                          "lr_warmup_steps", "lr_decay_steps",
//                                          "lr_decay_style", "num_steps"}}
//   <save>/iter_0000040/manifest.json   sizes and checksums of the above (written last)
//
// state.json is schema-checked on load: exactly these keys, integers where counts are
// (20.5 is refused, not truncated), no negative counter, skipped_steps <= iteration, an LR
// schedule that LrSchedule accepts, and the iteration of the folder it sits in.

#include <cstdint>
#include <filesystem>

#include "core/tensor.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/whole_model_tensors.hpp"
#include "train/loop_state.hpp"

namespace dyncp::train {

// Writes the three parts into `folder` (which exists and is empty). The moments are laid out
// like parameters.all_values(). With an expert slice every rank of the expert-parallel group
// calls this with its `gather` (collective) and only the one with `write` writes; a writer
// whose writing fails still takes part in every gather before the error propagates. Under
// pipeline stages the other stages' relays and their EP groups call it too, with `relay`
// (model::route_through_stages): every tensor reaches the writer from the stage holding it.
void write_training_checkpoint(const std::filesystem::path& folder,
                               const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state, model::ExpertGather* gather = nullptr,
                               bool write = true, model::StageTensorRelay* relay = nullptr);
// The same from ranks that may hold pieces of tensors: every rank taking part in `gathers`
// calls this (collective), and the one with `write` writes.
void write_training_checkpoint(const std::filesystem::path& folder,
                               const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state, const model::WholeModelGathers& gathers,
                               bool write, model::StageTensorRelay* relay = nullptr);

// Reads a verified checkpoint folder (CheckpointStore::select) of `iteration` into the
// parameters and moments (a tensor-parallel rank its pieces, read from each whole tensor one at
// a time); returns the loop state. A sharded checkpoint (format 3,
// train/sharded_checkpoint.hpp) is read the same way, every tensor these parameters hold. Data
// errors name the file for anything missing or malformed.
LoopState read_training_checkpoint(const std::filesystem::path& folder, std::int64_t iteration,
                                   const model::Qwen3MoeParameters& parameters,
                                   const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq);

}  // namespace dyncp::train
