#pragma once
// An asynchronous sharded save (checkpoint.async_save): the state is copied to a host
// snapshot at the step boundary, each rank's file is written by a background thread while
// training goes on, and the checkpoint is published once every rank's file is complete.
//
//   start (constructor)  collective: rank 0 makes the temporary folder; every rank copies its
//                        pieces ([weights | exp_avg | exp_avg_sq], its own state only) and
//                        starts its writer thread. The caller may change the state at once.
//   poll()               collective, at a step boundary: one all-reduce says whether every
//                        rank's thread has finished; when so, the finish step of
//                        train/sharded_checkpoint.hpp runs (index, state.json, manifest,
//                        publish) and the outcome is returned; otherwise nullopt and training
//                        goes on.
//   wait()               collective: joins this rank's thread, then finishes (the end of the
//                        run, or before the next save starts: one save in flight at a time).
//
// The background thread only writes its rank's file; every collective runs on the calling
// thread, in the same order on every rank. A failed write is logged by its rank (naming the
// file and the reason) and makes the save fail on every rank; the previous checkpoint stays
// complete and `latest` names it. The files are byte for byte those of a synchronous save of
// the same step (the same writer, reading the snapshot).

#include <atomic>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "train/sharded_checkpoint.hpp"

namespace dyncp::train {

class AsyncShardedSave {
 public:
  AsyncShardedSave(dist::Comm& world, CheckpointStore* store, const std::filesystem::path& save_dir,
                   const model::Qwen3MoeParameters& parameters, RankShard shard,
                   const ShardSources& sources, const LoopState& state, SavingLayout layout);
  // Joins the thread; a save never polled to its end is dropped (not published).
  ~AsyncShardedSave();
  AsyncShardedSave(const AsyncShardedSave&) = delete;
  AsyncShardedSave& operator=(const AsyncShardedSave&) = delete;

  std::int64_t iteration() const { return state_.iteration; }
  // The outcome once every rank finished writing (the same on every rank), else nullopt.
  std::optional<bool> poll();
  bool wait();
  // Whether poll() or wait() already returned the outcome.
  bool finished() const { return outcome_.has_value(); }

 private:
  bool finish();

  dist::Comm& world_;
  CheckpointStore* store_;
  const model::Qwen3MoeParameters& parameters_;
  RankShard shard_;
  LoopState state_;
  SavingLayout layout_;
  std::optional<std::filesystem::path> folder_;
  std::vector<float> snapshot_;
  RankWriteResult result_;
  std::atomic<bool> written_{false};
  std::thread writer_;
  std::optional<bool> outcome_;
};

}  // namespace dyncp::train
