#include "train/checkpoint_saver.hpp"

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "model/hf_checkpoint.hpp"
#include "train/hf_export.hpp"
#include "train/hf_export_writer.hpp"
#include "train/stage_tensor_relay.hpp"
#include "train/training_checkpoint.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

SavingLayout saving_layout(const config::ConfigContainer& config, const dist::Comm& world,
                           const dist::ParallelState& parallel_state) {
  const dist::ParallelLayout& layout = parallel_state.layout();
  return SavingLayout{world.size(),
                      layout.data_parallel_size,
                      layout.context_parallel_size,
                      layout.expert_model_parallel_size,
                      layout.dynamic_context_parallel,
                      config.ddp.use_distributed_optimizer,
                      layout.tensor_model_parallel_size,
                      layout.expert_tensor_parallel_size};
}

}  // namespace

CheckpointSaver::CheckpointSaver(const config::ConfigContainer& config, dist::Comm& world,
                                 dist::ParallelState& parallel_state,
                                 HostParameters& host_parameters, AdamWOptimizer& optimizer)
    : config_(config),
      world_(world),
      host_parameters_(host_parameters),
      optimizer_(optimizer),
      writer_gathers_(parallel_state),
      export_groups_{&parallel_state.tensor_parallel(), &parallel_state.expert_tensor_parallel()} {
  if (!config.checkpoint.save.empty()) {
    store_ = std::make_unique<CheckpointStore>(config.checkpoint.save,
                                               static_cast<int>(config.checkpoint.most_recent_k));
  }
  // Rank 0 writes; with pipeline stages the first rank of every other stage relays its stage's
  // tensors to it (train/stage_tensor_relay.hpp). The groups that help each of those ranks
  // rebuild whole tensors (its TP and EP groups, parallel::WriterGathers) take part.
  const dist::ParallelLayout& layout = parallel_state.layout();
  const bool first_of_stage = world.rank() % layout.stage_size() == 0;
  if (layout.pipeline_model_parallel_size > 1 && writer_gathers_.takes_part()) {
    using Role = model::StageTensorRelay::Role;
    const bool writer_stage = parallel_state.coordinates().pipeline_parallel_index == 0;
    const Role role = first_of_stage ? (writer_stage ? Role::writer : Role::relay)
                                     : (writer_stage ? Role::writer_gathers : Role::relay_gathers);
    relay_ = std::make_unique<PipelineTensorRelay>(
        role, parallel_state.pipeline(),
        config::split_layers(config::pipeline_split_input(config.model)));
  }
  if (store_ && (config.checkpoint.sharded || config.checkpoint.async_save)) {
    // The distributed optimizer's own division (the same plan its step engine made), so its
    // packed moments are written as they are.
    const model::Qwen3MoeParameters& parameters = host_parameters_.staging();
    sharded_ = std::make_unique<ShardedCheckpointSaver>(
        world, config.checkpoint.save, static_cast<int>(config.checkpoint.most_recent_k),
        parameters,
        checkpoint_shards(parameters, parallel_state.pool(), parallel_state.expert_data_parallel()),
        saving_layout(config, world, parallel_state), config.checkpoint.async_save);
    store_.reset();  // rank 0's store lives in the sharded saver
  }
}

void CheckpointSaver::poll() {
  if (sharded_) sharded_->poll();
}

void CheckpointSaver::wait() {
  if (sharded_) sharded_->wait();
}

bool CheckpointSaver::save(const LoopState& state) {
  if (sharded_) {
    const model::Qwen3MoeParameters& parameters = host_parameters_.download();
    return sharded_->save(parameters, optimizer_.host_moments(), state);
  }
  if (!store_) return false;
  // The checkpoint holds every moment whatever the layout: the distributed optimizer's pieces
  // are gathered into temporary buffers the size of this rank's parameters first, and the
  // experts of other EP ranks and the tensor-parallel pieces come through the gathers while
  // rank 0 writes.
  const AdamWOptimizer::FullSizeMoments moments = optimizer_.full_size_moments();
  optimizer_.gather_full_size_moments(moments);
  const model::Qwen3MoeParameters& parameters = host_parameters_.download();
  const model::WholeModelGathers& gathers = writer_gathers_.gathers();
  if (writer_gathers_.takes_part() && world_.rank() != 0) {
    write_training_checkpoint({}, parameters, moments.exp_avg, moments.exp_avg_sq, state, gathers,
                              /*write=*/false, relay_.get());
  }
  std::int32_t failed = 0;
  if (world_.rank() == 0) {
    std::string failure;
    fs::path folder;
    try {
      folder = store_->begin(state.iteration);
    } catch (const std::exception& error) {  // core::Error or std::filesystem's
      failure = error.what();
    }
    try {
      // Even when begin() failed: the other ranks of the EP group are gathering.
      write_training_checkpoint(folder, parameters, moments.exp_avg, moments.exp_avg_sq, state,
                                gathers, /*write=*/failure.empty(), relay_.get());
      if (failure.empty())
        spdlog::info("checkpoint saved: {}", store_->commit(state.iteration).string());
    } catch (const std::exception& error) {
      if (failure.empty()) failure = error.what();
    }
    if (!failure.empty()) {
      store_->abandon(state.iteration);
      spdlog::error("checkpoint at iteration {} failed, the previous one is kept: {}",
                    state.iteration, failure);
      failed = 1;
    }
  }
  world_.all_reduce(&failed, &failed, 1, core::DType::i32, dist::ReduceOp::max);
  return failed == 0;
}

void CheckpointSaver::export_hf(const fs::path& tokenizer_folder) {
  // Every rank writes the pieces it holds (train/hf_export_writer.hpp); rank 0 adds the
  // tokenizer and generation config once the weights are in place.
  const std::string& folder = config_.checkpoint.export_hf;
  const model::Qwen3MoeParameters& parameters = host_parameters_.download();
  const std::uint64_t written = write_hf_weights_in_parallel(
      world_, folder, parameters, model::StoredDType::bf16, hf_export_shard_bytes, export_groups_);
  std::uint64_t most = written, total = written;
  world_.all_reduce(&most, &most, 1, core::DType::i64, dist::ReduceOp::max);
  world_.all_reduce(&total, &total, 1, core::DType::i64, dist::ReduceOp::sum);
  if (world_.rank() == 0) {
    complete_hf_export(folder, tokenizer_folder, model::StoredDType::bf16,
                       config_.model.architecture);
    spdlog::info("HF weights exported to {} by {} ranks ({} bytes, at most {} from one rank)",
                 folder, world_.size(), total, most);
  }
  world_.barrier();
}

void require_final_save(bool saved, const LoopState& state, const std::string& save_folder) {
  if (saved) return;
  core::throw_runtime_error("the final checkpoint (iteration " + std::to_string(state.iteration) +
                            ") could not be written to " + save_folder +
                            "; the trained steps since the last good checkpoint are lost "
                            "(see the error above)");
}

}  // namespace dyncp::train
