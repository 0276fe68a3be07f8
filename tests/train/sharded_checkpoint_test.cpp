// Sharded checkpoints (train/sharded_checkpoint.hpp) under mpirun with 4 ranks, EP 2: every
// rank writes its own file of about 1/world of the state, the index tiles every tensor, any
// layout (one rank with the whole model, EP 4 on 4 ranks with the distributed optimizer's
// pieces) reads back exactly the saved values, and a failed or damaged shard of one rank
// leaves the previous checkpoint loading.

#include "train/sharded_checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "checkpoint_test_files.hpp"
#include "checkpoint_test_moments.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "mpi_test_world.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/parameter_partition.hpp"
#include "parallel/sharded_state_sync.hpp"
#include "train/async_sharded_save.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/checkpoint_resume.hpp"
#include "train/sharded_checkpoint_saver.hpp"
#include "train/training_checkpoint.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

config::ModelArchitecture tiny_architecture() {
  return test::smoke_architecture("tiny_mock.yaml");
}

// One folder for every rank: rank 0's pid names it.
fs::path shared_dir(dist::Comm& world, const std::string& name) {
  return test::shared_dir(world, "dyncp_sharded", name);
}

using test::file_bytes;
using test::loop_state;
using test::moments_for;

bool same(const float* a, const float* b, std::int64_t count) {
  return std::equal(a, a + count, b);
}

// A rank of some layout with its slice of the model, seeded state and optimizer plan.
struct RankState {
  RankState(dist::Comm& world, int expert_parallel)
      : parallel_state(world, dist::layout_for_world(world.size(), 1, expert_parallel, false, 1)),
        architecture(tiny_architecture()),
        parameters(architecture, parallel::local_expert_range(architecture.num_experts,
                                                              parallel_state.expert_parallel())),
        shards(parallel::plan_optimizer_shards(
            parallel::partition_parameters(parameters), parallel_state.pool().size(),
            parallel_state.pool().rank(), parallel_state.expert_data_parallel().size(),
            parallel_state.expert_data_parallel().rank())) {
    parameters.init_random(3);
    exp_avg = moments_for(parameters, 1);
    exp_avg_sq = moments_for(parameters, 2);
    shard = train::plan_rank_shard(parameters, shards);
    layout.world_size = world.size();
    layout.data_parallel = world.size();
    layout.expert_parallel = expert_parallel;
  }
  train::ShardSources flat_sources() const {
    return {{{parameters.all_values().data<float>(), false},
             {exp_avg.data<float>(), false},
             {exp_avg_sq.data<float>(), false}}};
  }
  dist::ParallelState parallel_state;
  config::ModelArchitecture architecture;
  model::Qwen3MoeParameters parameters;
  parallel::OptimizerShards shards;
  core::Tensor exp_avg, exp_avg_sq;
  train::RankShard shard;
  train::SavingLayout layout;
};

std::unique_ptr<train::CheckpointStore> store_on_rank0(dist::Comm& world, const fs::path& dir) {
  if (world.rank() != 0) return nullptr;
  return std::make_unique<train::CheckpointStore>(dir, -1);
}

bool save(dist::Comm& world, const RankState& rank, const fs::path& dir, std::int64_t iteration,
          const train::ShardSources& sources) {
  const auto store = store_on_rank0(world, dir);
  const train::LoopState state = loop_state(iteration);
  return train::save_sharded_checkpoint(world, store.get(), dir, rank.parameters, rank.shard,
                                        sources, state, rank.layout);
}

}  // namespace

TEST_CASE("every rank writes its own shard and any layout reads the same state back",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  REQUIRE(world.size() == 4);
  const RankState saving(world, 2);
  const fs::path dir = shared_dir(world, "layouts");
  REQUIRE(save(world, saving, dir, 5, saving.flat_sources()));
  const fs::path folder = dir / train::CheckpointStore::folder_name(5);

  // One file per rank, each within 10% of the state / world; the manifest verifies.
  const model::Qwen3MoeParameters whole(saving.architecture);
  const double per_rank = 12.0 * static_cast<double>(whole.num_parameters()) / world.size();
  for (int r = 0; r < world.size(); ++r) {
    const std::uintmax_t bytes = fs::file_size(folder / train::rank_shard_path(r));
    INFO("rank " << r << ": " << bytes << " bytes, state / world " << per_rank);
    CHECK(std::abs(static_cast<double>(bytes) - per_rank) <= 0.1 * per_rank);
  }
  CHECK(fs::file_size(folder / train::rank_shard_path(world.rank())) == saving.shard.file_bytes());
  CHECK(train::verify_checkpoint_manifest(folder) == 5);
  const auto chosen = train::CheckpointStore::select(dir);
  REQUIRE(chosen);
  CHECK(chosen->iteration == 5);

  // The index tiles every tensor of the whole model and records the saving layout.
  const train::ShardedIndex index = train::parse_sharded_index(
      file_bytes(folder / train::sharded_index_name), train::sharded_index_name);
  CHECK(index.tensors.size() == model::whole_model_tensors(whole).size());
  CHECK(index.files.size() == 4);
  CHECK(index.layout.world_size == 4);
  CHECK(index.layout.expert_parallel == 2);

  // A packed source (the distributed optimizer's moments) writes the very same bytes.
  {
    std::vector<float> packed_avg(static_cast<std::size_t>(saving.shards.owned_elements));
    std::vector<float> packed_avg_sq(packed_avg.size());
    std::size_t at = 0;
    for (const parallel::ParameterRange& range : saving.shards.owned_ranges) {
      std::copy_n(saving.exp_avg.data<float>() + range.offset, range.count, &packed_avg[at]);
      std::copy_n(saving.exp_avg_sq.data<float>() + range.offset, range.count, &packed_avg_sq[at]);
      at += static_cast<std::size_t>(range.count);
    }
    const fs::path other = shared_dir(world, "packed");
    train::ShardSources packed = saving.flat_sources();
    packed.parts[1] = {packed_avg.data(), true};
    packed.parts[2] = {packed_avg_sq.data(), true};
    REQUIRE(save(world, saving, other, 5, packed));
    const std::string relative = train::rank_shard_path(world.rank());
    CHECK(file_bytes(other / train::CheckpointStore::folder_name(5) / relative) ==
          file_bytes(folder / relative));
    // And so does a snapshot taken for an asynchronous save.
    const std::vector<float> snapshot = train::snapshot_rank_shard(saving.shard, packed);
    std::error_code ignored;
    fs::create_directories(other / "shards", ignored);
    const train::RankWriteResult written = train::write_rank_shard(
        other, world.rank(), saving.shard, train::snapshot_sources(saving.shard, snapshot));
    REQUIRE(written.failure.empty());
    CHECK(file_bytes(other / relative) == file_bytes(folder / relative));
    world.barrier();
    if (world.rank() == 0) fs::remove_all(other);
  }

  // One rank alone, the whole model (EP 1), through the generic reader.
  {
    const model::Qwen3MoeParameters reread(saving.architecture);
    core::Tensor exp_avg = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
    core::Tensor exp_avg_sq = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
    const train::LoopState state =
        train::read_training_checkpoint(folder, 5, reread, exp_avg, exp_avg_sq);
    CHECK(state.iteration == 5);
    CHECK(state.consumed_samples == 80);
    CHECK(state.format == 3);
    const model::Qwen3MoeParameters reference(saving.architecture);
    reference.init_random(3);
    const std::int64_t n = reference.num_parameters();
    CHECK(same(reread.all_values().data<float>(), reference.all_values().data<float>(), n));
    CHECK(same(exp_avg.data<float>(), moments_for(reference, 1).data<float>(), n));
    CHECK(same(exp_avg_sq.data<float>(), moments_for(reference, 2).data<float>(), n));
  }

  // EP 4 on the same 4 ranks, reading only the moments its distributed optimizer owns.
  {
    const RankState loading(world, 4);
    const model::Qwen3MoeParameters& reread = loading.parameters;
    const model::Qwen3MoeParameters target(loading.architecture, reread.expert_range());
    core::Tensor exp_avg = core::Tensor::zeros(target.all_values().shape(), core::DType::f32);
    core::Tensor exp_avg_sq = core::Tensor::zeros(target.all_values().shape(), core::DType::f32);
    train::read_sharded_checkpoint(folder, 5, target, exp_avg, exp_avg_sq,
                                   loading.shards.owned_ranges);
    const std::int64_t n = target.num_parameters();
    CHECK(same(target.all_values().data<float>(), reread.all_values().data<float>(), n));
    std::vector<char> owned(static_cast<std::size_t>(n), 0);
    for (const parallel::ParameterRange& range : loading.shards.owned_ranges) {
      CHECK(same(exp_avg.data<float>() + range.offset, loading.exp_avg.data<float>() + range.offset,
                 range.count));
      CHECK(same(exp_avg_sq.data<float>() + range.offset,
                 loading.exp_avg_sq.data<float>() + range.offset, range.count));
      std::fill_n(owned.begin() + range.offset, range.count, 1);
    }
    // Nothing outside the owned ranges was read.
    std::int64_t touched = 0;
    for (std::int64_t i = 0; i < n; ++i)
      if (owned[static_cast<std::size_t>(i)] == 0 && exp_avg.data<float>()[i] != 0.0f) ++touched;
    CHECK(touched == 0);
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("a failed write on one rank fails the save on every rank", "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const RankState saving(world, 2);
  const fs::path dir = shared_dir(world, "enospc");
  REQUIRE(save(world, saving, dir, 1, saving.flat_sources()));
  if (world.rank() == 2) {
    ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "1000", 1);
    ::setenv("DYNCP_FAULT_ENOSPC_FILE", "rank_00002.bin", 1);
  }
  const bool saved = save(world, saving, dir, 2, saving.flat_sources());
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  ::unsetenv("DYNCP_FAULT_ENOSPC_FILE");
  CHECK_FALSE(saved);  // on every rank
  world.barrier();
  CHECK(file_bytes(dir / "latest") == "iter_0000001\n");
  CHECK_FALSE(fs::exists(dir / train::CheckpointStore::folder_name(2)));
  CHECK_FALSE(fs::exists(train::CheckpointStore::temporary_folder(dir, 2)));
  CHECK(train::CheckpointStore::select(dir)->iteration == 1);
  // The next save goes through.
  REQUIRE(save(world, saving, dir, 3, saving.flat_sources()));
  CHECK(train::CheckpointStore::select(dir)->iteration == 3);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("a damaged or missing shard of one rank is named and the older checkpoint loads",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const RankState saving(world, 2);
  const fs::path dir = shared_dir(world, "damaged");
  REQUIRE(save(world, saving, dir, 1, saving.flat_sources()));
  REQUIRE(save(world, saving, dir, 2, saving.flat_sources()));
  world.barrier();
  // Rank 0 damages rank 3's shard of the newest checkpoint (no SECTIONs: every rank must run
  // the same collectives).
  if (world.rank() == 0) {
    const fs::path newest = dir / train::CheckpointStore::folder_name(2);
    const fs::path shard = newest / train::rank_shard_path(3);
    const std::string original = file_bytes(shard);
    const auto require_fallback = [&](const char* what) {
      INFO(what);
      CHECK_THROWS_WITH(train::verify_checkpoint_manifest(newest),
                        Catch::Contains("shards/rank_00003.bin"));
      const auto chosen = train::CheckpointStore::select(dir);
      REQUIRE(chosen);
      CHECK(chosen->iteration == 1);
    };
    {
      std::string flipped = original;
      flipped[100] = static_cast<char>(flipped[100] ^ 0x10);
      std::ofstream(shard, std::ios::binary | std::ios::trunc) << flipped;
    }
    require_fallback("a flipped bit");
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << original.substr(0, 64);
    require_fallback("a truncated file");
    fs::remove(shard);
    require_fallback("a missing file");
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << original;
    CHECK(train::CheckpointStore::select(dir)->iteration == 2);
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("an index that does not tile its tensors is refused naming the tensor", "[checkpoint]") {
  train::ShardedIndex index;
  index.iteration = 4;
  index.files = {{"shards/rank_00000.bin", 12 * 10}};
  index.tensors = {
      {"model.norm.weight", {10}, {{0, 0, 6, {0, 40, 80}}, {0, 6, 10, {24, 64, 104}}}}};
  const std::string good = train::sharded_index_json(index);
  const train::ShardedIndex parsed = train::parse_sharded_index(good, "index.json");
  REQUIRE(parsed.tensors.size() == 1);
  CHECK(parsed.tensors[0].pieces[1].offsets[2] == 104);

  train::ShardedIndex gap = index;
  gap.tensors[0].pieces[1].begin = 7;
  CHECK_THROWS_WITH(train::parse_sharded_index(train::sharded_index_json(gap), "index.json"),
                    Catch::Contains("model.norm.weight") && Catch::Contains("tile"));
  train::ShardedIndex short_cover = index;
  short_cover.tensors[0].pieces[1].end = 9;
  CHECK_THROWS_WITH(
      train::parse_sharded_index(train::sharded_index_json(short_cover), "index.json"),
      Catch::Contains("cover 9 of 10"));
  train::ShardedIndex past_end = index;
  past_end.tensors[0].pieces[1].offsets[2] = 110;
  CHECK_THROWS_WITH(train::parse_sharded_index(train::sharded_index_json(past_end), "index.json"),
                    Catch::Contains("past the end of shards/rank_00000.bin"));
  train::ShardedIndex escaping = index;
  escaping.files[0].path = "../rank_00000.bin";
  CHECK_THROWS_WITH(train::parse_sharded_index(train::sharded_index_json(escaping), "index.json"),
                    Catch::Contains("leaves the checkpoint folder"));
}

TEST_CASE("an asynchronous save writes the synchronous save's bytes while the state changes",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  RankState rank(world, 2);
  const fs::path sync_dir = shared_dir(world, "sync");
  const fs::path async_dir = shared_dir(world, "async");
  REQUIRE(save(world, rank, sync_dir, 4, rank.flat_sources()));

  const auto store = store_on_rank0(world, async_dir);
  train::AsyncShardedSave pending(world, store.get(), async_dir, rank.parameters, rank.shard,
                                  rank.flat_sources(), loop_state(4), rank.layout);
  // Training goes on: the state changes under the save, steps (collectives) keep running.
  rank.parameters.all_values().fill_zero();
  rank.exp_avg.fill_zero();
  int steps = 0;
  std::optional<bool> outcome;
  while (!(outcome = pending.poll())) {
    std::int32_t token = 1;
    world.all_reduce(&token, &token, 1, core::DType::i32, dist::ReduceOp::sum);
    REQUIRE(token == world.size());
    ++steps;
  }
  INFO("steps while the save ran: " << steps);
  CHECK(*outcome);
  CHECK(pending.finished());
  CHECK(pending.wait());  // the outcome again, no second publish
  const fs::path a = sync_dir / train::CheckpointStore::folder_name(4);
  const fs::path b = async_dir / train::CheckpointStore::folder_name(4);
  for (const std::string& relative :
       {train::rank_shard_path(world.rank()), std::string("index.json"), std::string("state.json"),
        std::string("model/config.json"), std::string("manifest.json")}) {
    INFO(relative);
    CHECK(file_bytes(a / relative) == file_bytes(b / relative));
  }
  world.barrier();
  if (world.rank() == 0) {
    fs::remove_all(sync_dir);
    fs::remove_all(async_dir);
  }
}

TEST_CASE("a failed background write fails the save on every rank and keeps the previous one",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const RankState rank(world, 2);
  const fs::path dir = shared_dir(world, "async_enospc");
  REQUIRE(save(world, rank, dir, 1, rank.flat_sources()));
  if (world.rank() == 1) {
    ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "0", 1);
    ::setenv("DYNCP_FAULT_ENOSPC_FILE", "rank_00001.bin", 1);
  }
  const auto store = store_on_rank0(world, dir);
  bool saved = true;
  {
    train::AsyncShardedSave pending(world, store.get(), dir, rank.parameters, rank.shard,
                                    rank.flat_sources(), loop_state(2), rank.layout);
    saved = pending.wait();
  }
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  ::unsetenv("DYNCP_FAULT_ENOSPC_FILE");
  CHECK_FALSE(saved);
  world.barrier();
  CHECK(file_bytes(dir / "latest") == "iter_0000001\n");
  CHECK_FALSE(fs::exists(train::CheckpointStore::temporary_folder(dir, 2)));
  CHECK(train::CheckpointStore::select(dir)->iteration == 1);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("the saver writes the same shards from a replicated and a distributed optimizer",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  RankState rank(world, 2);
  dist::Comm& pool = rank.parallel_state.pool();
  dist::Comm& expert_dp = rank.parallel_state.expert_data_parallel();
  const train::AdamWOptimizer::FullSizeMoments full{rank.exp_avg, rank.exp_avg_sq};
  train::AdamWOptimizer replicated(rank.parameters, parallel::partition_parameters(rank.parameters),
                                   {});
  replicated.load_full_size_moments(full);
  parallel::ShardedStateSync sync(rank.shards, pool, expert_dp);
  train::AdamWOptimizer distributed(rank.parameters, sync, {});
  distributed.load_full_size_moments(full);
  REQUIRE(distributed.host_moments().packed);
  REQUIRE_FALSE(replicated.host_moments().packed);

  const fs::path dirs[3] = {shared_dir(world, "saver_replicated"),
                            shared_dir(world, "saver_distributed"),
                            shared_dir(world, "saver_async")};
  {
    train::ShardedCheckpointSaver saver(world, dirs[0], -1, rank.parameters,
                                        train::checkpoint_shards(rank.parameters, pool, expert_dp),
                                        rank.layout, false);
    CHECK(saver.save(rank.parameters, replicated.host_moments(), loop_state(6)));
    CHECK_FALSE(saver.in_flight());
  }
  {
    train::ShardedCheckpointSaver saver(world, dirs[1], -1, rank.parameters, sync.shards(),
                                        rank.layout, false);
    CHECK(saver.save(rank.parameters, distributed.host_moments(), loop_state(6)));
  }
  {
    train::ShardedCheckpointSaver saver(world, dirs[2], -1, rank.parameters, sync.shards(),
                                        rank.layout, true);
    CHECK(saver.save(rank.parameters, distributed.host_moments(), loop_state(6)));
    CHECK(saver.in_flight());
    while (saver.in_flight()) saver.poll();
    saver.wait();  // nothing left: a no-op
  }
  const std::string relative = train::rank_shard_path(world.rank());
  const std::string name = train::CheckpointStore::folder_name(6);
  CHECK(file_bytes(dirs[0] / name / relative) == file_bytes(dirs[1] / name / relative));
  CHECK(file_bytes(dirs[1] / name / relative) == file_bytes(dirs[2] / name / relative));
  CHECK(file_bytes(dirs[1] / name / "manifest.json") ==
        file_bytes(dirs[2] / name / "manifest.json"));

  // The distributed optimizer resumes reading only its own moments.
  train::AdamWOptimizer resumed(rank.parameters, sync, {});
  const train::AdamWOptimizer::FullSizeMoments read = resumed.full_size_moments();
  train::read_sharded_checkpoint(dirs[1] / name, 6, rank.parameters, read.exp_avg, read.exp_avg_sq,
                                 resumed.moment_ranges());
  resumed.load_full_size_moments(read);
  const auto a = resumed.host_moments();
  const auto b = distributed.host_moments();
  CHECK(same(a.exp_avg.data<float>(), b.exp_avg.data<float>(), a.exp_avg.numel()));
  CHECK(same(a.exp_avg_sq.data<float>(), b.exp_avg_sq.data<float>(), a.exp_avg_sq.numel()));
  world.barrier();
  if (world.rank() == 0)
    for (const fs::path& dir : dirs) fs::remove_all(dir);
}

TEST_CASE("a failed asynchronous save ends the run on every rank", "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const RankState rank(world, 2);
  const fs::path dir = shared_dir(world, "saver_fails");
  train::ShardedCheckpointSaver saver(world, dir, -1, rank.parameters, rank.shards, rank.layout,
                                      true);
  train::AdamWOptimizer::HostMoments moments{rank.exp_avg, rank.exp_avg_sq, false};
  REQUIRE(saver.save(rank.parameters, moments, loop_state(1)));
  saver.wait();
  if (world.rank() == 3) {
    ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "0", 1);
    ::setenv("DYNCP_FAULT_ENOSPC_FILE", "rank_00003.bin", 1);
  }
  REQUIRE(saver.save(rank.parameters, moments, loop_state(2)));
  CHECK_THROWS_WITH(saver.wait(), Catch::Contains("asynchronous checkpoint of iteration 2") &&
                                      Catch::Contains("previous checkpoint is kept"));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  ::unsetenv("DYNCP_FAULT_ENOSPC_FILE");
  CHECK_FALSE(saver.in_flight());
  world.barrier();
  CHECK(train::CheckpointStore::select(dir)->iteration == 1);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("the loading ranks hash the shards in parallel and reject a damaged one",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const RankState rank(world, 2);
  const fs::path dir = shared_dir(world, "verify");
  REQUIRE(save(world, rank, dir, 1, rank.flat_sources()));
  REQUIRE(save(world, rank, dir, 2, rank.flat_sources()));
  config::CheckpointConfig checkpoint;
  checkpoint.load = dir.string();
  auto chosen = train::agree_on_resume_checkpoint(checkpoint, world);
  REQUIRE(chosen);
  CHECK(chosen->iteration == 2);
  world.barrier();
  const fs::path newest = dir / train::CheckpointStore::folder_name(2);
  if (world.rank() == 0) {
    // Flip a bit of rank 2's shard (hashed by rank 2 on loading, not by rank 0).
    const fs::path shard = newest / train::rank_shard_path(2);
    std::string bytes = file_bytes(shard);
    bytes[200] = static_cast<char>(bytes[200] ^ 0x01);
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
    // Rank 0's own check leaves the shards' checksums to the ranks.
    std::vector<train::ManifestEntry> deferred;
    train::SelectOptions options;
    options.deferred = &deferred;
    const auto unhashed = train::CheckpointStore::select(dir, std::nullopt, options);
    REQUIRE(unhashed);
    CHECK(unhashed->iteration == 2);
    CHECK(deferred.size() == 4);
  }
  world.barrier();
  chosen = train::agree_on_resume_checkpoint(checkpoint, world);
  REQUIRE(chosen);
  CHECK(chosen->iteration == 1);
  CHECK(chosen->folder == dir / train::CheckpointStore::folder_name(1));
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}
