#include "train/async_sharded_save.hpp"

namespace dyncp::train {

AsyncShardedSave::AsyncShardedSave(dist::Comm& world, CheckpointStore* store,
                                   const std::filesystem::path& save_dir,
                                   const model::Qwen3MoeParameters& parameters, RankShard shard,
                                   const ShardSources& sources, const LoopState& state,
                                   SavingLayout layout)
    : world_(world),
      store_(store),
      parameters_(parameters),
      shard_(std::move(shard)),
      state_(state),
      layout_(layout) {
  folder_ = begin_sharded_save(world_, store_, save_dir, state_.iteration);
  if (!folder_) {
    outcome_ = false;  // logged by rank 0; every rank knows
    return;
  }
  snapshot_ = snapshot_rank_shard(shard_, sources);
  writer_ = std::thread([this] {
    result_ =
        write_rank_shard(*folder_, world_.rank(), shard_, snapshot_sources(shard_, snapshot_));
    written_.store(true, std::memory_order_release);
  });
}

AsyncShardedSave::~AsyncShardedSave() {
  if (writer_.joinable()) writer_.join();
  if (!outcome_ && store_ != nullptr) store_->abandon(state_.iteration);
}

std::optional<bool> AsyncShardedSave::poll() {
  if (outcome_) return outcome_;
  std::int32_t pending = written_.load(std::memory_order_acquire) ? 0 : 1;
  world_.all_reduce(&pending, &pending, 1, core::DType::i32, dist::ReduceOp::max);
  if (pending != 0) return std::nullopt;
  return finish();
}

bool AsyncShardedSave::wait() {
  if (outcome_) return *outcome_;
  if (writer_.joinable()) writer_.join();
  return finish();
}

bool AsyncShardedSave::finish() {
  if (writer_.joinable()) writer_.join();  // finished already: only collects the thread
  std::vector<float>().swap(snapshot_);    // the snapshot's memory goes back at once
  outcome_ =
      finish_sharded_save(world_, store_, *folder_, parameters_, shard_, result_, state_, layout_);
  return *outcome_;
}

}  // namespace dyncp::train
