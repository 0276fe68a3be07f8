#pragma once
// Writes a run's training checkpoints (checkpoint.save, through train::CheckpointStore) and its
// HF export (checkpoint.export_hf). Single-writer checkpoints (checkpoint.sharded false): rank 0
// writes; the other ranks of its EP group send it their experts one MoE layer at a time
// (parallel::EpExpertGather), under tensor parallelism its TP group sums the pieces of one
// tensor at a time (parallel/whole_model_gathers.hpp), with pipeline stages every other stage's
// first rank relays its stage's tensors (train/stage_tensor_relay.hpp), and the distributed
// optimizer's pieces are gathered into full-size moments first, so what is written does not
// depend on the layout. With
// checkpoint.sharded (or checkpoint.async_save) every rank writes its own pieces instead
// (train/sharded_checkpoint_saver.hpp), loadable under any layout too. The HF export is
// always written by the ranks holding its tensors (train/hf_export_writer.hpp);
// asynchronously, save() returns once the state is copied, poll() publishes at a later step
// boundary, and wait() ends the save in flight (a failed one throws: exit 1). Every method is
// collective over the world.

#include <filesystem>
#include <memory>
#include <string>

#include "config/config_container.hpp"
#include "dist/comm.hpp"
#include "dist/parallel_state.hpp"
#include "parallel/whole_model_gathers.hpp"
#include "train/checkpoint_store.hpp"
#include "train/hf_export_writer.hpp"
#include "train/loop_state.hpp"
#include "train/optimizer.hpp"
#include "train/sharded_checkpoint_saver.hpp"
#include "train/stage_tensor_relay.hpp"
#include "train/training_device.hpp"

namespace dyncp::train {

class CheckpointSaver {
 public:
  CheckpointSaver(const config::ConfigContainer& config, dist::Comm& world,
                  dist::ParallelState& parallel_state, HostParameters& host_parameters,
                  AdamWOptimizer& optimizer);

  // Whether checkpoint.save is set: without it save() saves nothing and returns false.
  bool saves() const { return store_ != nullptr || sharded_ != nullptr; }
  // Saves `state` with the current parameters and moments. Returns whether the checkpoint was
  // saved (the same answer on every rank); a failure is logged, the previous checkpoint is
  // kept, and the caller decides whether it ends the run.
  bool save(const LoopState& state);
  // At every step boundary: publishes an asynchronous save every rank has finished writing.
  void poll();
  // The asynchronous save in flight, if any, published (or a runtime error when it failed).
  void wait();
  // The HF folder of checkpoint.export_hf (bf16 weights, config, tokenizer files from
  // `tokenizer_folder` when not empty, generation config).
  void export_hf(const std::filesystem::path& tokenizer_folder);

 private:
  const config::ConfigContainer& config_;
  dist::Comm& world_;
  HostParameters& host_parameters_;
  AdamWOptimizer& optimizer_;
  std::unique_ptr<CheckpointStore> store_;
  parallel::WriterGathers writer_gathers_;           // how this rank helps its stage's writer
  ExportGroups export_groups_;                       // who rebuilds split tensors for the HF export
  std::unique_ptr<PipelineTensorRelay> relay_;       // pipeline stages: the writer's or a relay's
  std::unique_ptr<ShardedCheckpointSaver> sharded_;  // checkpoint.sharded / async_save
};

// Ends the run with exit 1 (a runtime error) when the checkpoint that closes it was not saved.
void require_final_save(bool saved, const LoopState& state, const std::string& save_folder);

}  // namespace dyncp::train
