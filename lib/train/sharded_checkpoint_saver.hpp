#pragma once
// A run's sharded checkpoint saves (train/sharded_checkpoint.hpp), synchronous or
// asynchronous (checkpoint.async_save), from the optimizer's own moments: what the training
// loop calls at a save, at every step boundary and at the end.
//
//   synchronous   save() writes every rank's file and publishes before it returns.
//   asynchronous  save() first finishes the save in flight (one at a time), then snapshots
//                 this rank's pieces and returns while a background thread writes them;
//                 poll() at every step boundary publishes it once every rank is done; wait()
//                 at the end of the run (the final save is always waited for).
// A failed asynchronous save throws a runtime error on every rank from poll() / wait() /
// the next save() (the run ends with exit 1), after its rank logged which file failed and
// why; the previous checkpoint stays complete and `latest` names it.

#include <filesystem>
#include <memory>

#include "dist/comm.hpp"
#include "train/async_sharded_save.hpp"
#include "train/optimizer.hpp"
#include "train/sharded_checkpoint.hpp"

namespace dyncp::train {

// What each rank writes when the optimizer is replicated: the division the distributed
// optimizer would use (dense state over `pool`, expert state over `expert_data_parallel`).
parallel::OptimizerShards checkpoint_shards(const model::Qwen3MoeParameters& parameters,
                                            const dist::Comm& pool,
                                            const dist::Comm& expert_data_parallel);

class ShardedCheckpointSaver {
 public:
  // `parameters`: the host parameters the saves read; `shards`: what this rank writes (the
  // distributed optimizer's plan, or checkpoint_shards). Rank 0 owns the checkpoint store.
  ShardedCheckpointSaver(dist::Comm& world, const std::filesystem::path& save_dir,
                         int most_recent_k, const model::Qwen3MoeParameters& parameters,
                         const parallel::OptimizerShards& shards, SavingLayout layout, bool async);
  ~ShardedCheckpointSaver();

  // Collective. Synchronous: whether the checkpoint was published (a failure is logged and
  // training may go on). Asynchronous: true once started (see above).
  bool save(const model::Qwen3MoeParameters& parameters, const AdamWOptimizer::HostMoments& moments,
            const LoopState& state);
  // Collective, at every step boundary (asynchronous saves; nothing otherwise).
  void poll();
  // Collective: the save in flight, if any, finished and published (or thrown).
  void wait();
  bool in_flight() const { return pending_ != nullptr; }
  const RankShard& shard() const { return shard_; }

 private:
  void take_outcome(bool published, std::int64_t iteration);

  dist::Comm& world_;
  std::filesystem::path save_dir_;
  std::unique_ptr<CheckpointStore> store_;
  RankShard shard_;
  SavingLayout layout_;
  bool async_;
  std::unique_ptr<AsyncShardedSave> pending_;
};

}  // namespace dyncp::train
