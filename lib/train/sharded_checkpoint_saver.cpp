#include "train/sharded_checkpoint_saver.hpp"

#include "core/error.hpp"
#include "parallel/parameter_partition.hpp"

namespace dyncp::train {

namespace {

ShardSources sources_of(const model::Qwen3MoeParameters& parameters,
                        const AdamWOptimizer::HostMoments& moments) {
  return ShardSources{{ShardPart{parameters.all_values().data<float>(), false},
                       ShardPart{moments.exp_avg.data<float>(), moments.packed},
                       ShardPart{moments.exp_avg_sq.data<float>(), moments.packed}}};
}

}  // namespace

parallel::OptimizerShards checkpoint_shards(const model::Qwen3MoeParameters& parameters,
                                            const dist::Comm& pool,
                                            const dist::Comm& expert_data_parallel) {
  return parallel::plan_optimizer_shards(parallel::partition_parameters(parameters), pool.size(),
                                         pool.rank(), expert_data_parallel.size(),
                                         expert_data_parallel.rank());
}

ShardedCheckpointSaver::ShardedCheckpointSaver(dist::Comm& world,
                                               const std::filesystem::path& save_dir,
                                               int most_recent_k,
                                               const model::Qwen3MoeParameters& parameters,
                                               const parallel::OptimizerShards& shards,
                                               SavingLayout layout, bool async)
    : world_(world),
      save_dir_(save_dir),
      shard_(plan_rank_shard(parameters, shards)),
      layout_(layout),
      async_(async) {
  if (world_.rank() == 0) store_ = std::make_unique<CheckpointStore>(save_dir_, most_recent_k);
}

ShardedCheckpointSaver::~ShardedCheckpointSaver() = default;

void ShardedCheckpointSaver::take_outcome(bool published, std::int64_t iteration) {
  pending_.reset();
  if (!published) {
    core::throw_runtime_error("the asynchronous checkpoint of iteration " +
                              std::to_string(iteration) + " could not be written to " +
                              save_dir_.string() +
                              " (the error above names the rank and the file); the previous "
                              "checkpoint is kept");
  }
}

bool ShardedCheckpointSaver::save(const model::Qwen3MoeParameters& parameters,
                                  const AdamWOptimizer::HostMoments& moments,
                                  const LoopState& state) {
  if (!async_) {
    return save_sharded_checkpoint(world_, store_.get(), save_dir_, parameters, shard_,
                                   sources_of(parameters, moments), state, layout_);
  }
  wait();  // one save in flight at a time
  pending_ = std::make_unique<AsyncShardedSave>(world_, store_.get(), save_dir_, parameters, shard_,
                                                sources_of(parameters, moments), state, layout_);
  if (pending_->finished()) take_outcome(pending_->wait(), state.iteration);  // begin failed
  return true;
}

void ShardedCheckpointSaver::poll() {
  if (!pending_) return;
  const std::int64_t iteration = pending_->iteration();
  if (const std::optional<bool> outcome = pending_->poll()) take_outcome(*outcome, iteration);
}

void ShardedCheckpointSaver::wait() {
  if (!pending_) return;
  const std::int64_t iteration = pending_->iteration();
  take_outcome(pending_->wait(), iteration);
}

}  // namespace dyncp::train
