// Checkpoints and HF exports under tensor parallelism (mpirun, 4 ranks): whatever pieces the
// ranks hold (tp 2 and 4, experts whole or split over the expert-TP group, with EP), the
// single-writer checkpoint is byte for byte the one the whole model writes; a sharded
// checkpoint writes every element exactly once, its index describes the pieces as blocks,
// and every layout (tp 1, 2 and 4, any etp and ep) reads back exactly its pieces of the saved
// state, from format-2 indexes and from the format-1 indexes of runs without TP; the HF export
// the ranks write in parallel from their pieces is byte for byte the whole model's.

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>

#include "checkpoint_test_files.hpp"
#include "checkpoint_test_moments.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "model/hf_checkpoint.hpp"
#include "mpi_test_world.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/whole_model_gathers.hpp"
#include "train/checkpoint_store.hpp"
#include "train/hf_export_writer.hpp"
#include "train/sharded_checkpoint.hpp"
#include "train/sharded_checkpoint_saver.hpp"
#include "train/training_checkpoint.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

config::ModelArchitecture architecture_of(const std::string& recipe, std::int64_t heads = 0) {
  return test::smoke_architecture(recipe, heads);
}

fs::path shared_dir(dist::Comm& world, const std::string& name) {
  return test::shared_dir(world, "dyncp_tp_ckpt", name);
}

using test::loop_state;

std::string file_bytes(const fs::path& path) {
  REQUIRE(fs::exists(path));
  return test::file_bytes(path);
}

bool same(const core::Tensor& a, const core::Tensor& b) {
  return a.numel() == b.numel() &&
         std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

struct Layout {
  int tp = 1;
  int etp = 1;
  int ep = 1;
};

// A rank of a tp x dp layout (EP ep, experts split over etp) with its pieces of the model and
// of two moment buffers, all keyed on the whole model's HF elements.
struct TpRank {
  TpRank(dist::Comm& world, const config::ModelArchitecture& architecture, Layout layout)
      : parallel_state(world, dist::layout_for_world(world.size(), 1, layout.ep, false, 1, {},
                                                     {layout.tp, layout.etp})),
        parameters(architecture,
                   parallel::local_expert_range(architecture.num_experts,
                                                parallel_state.expert_parallel()),
                   core::DType::f32, core::Device::cpu,
                   model::TensorParallelShape{layout.tp, parallel_state.tensor_parallel().rank(),
                                              layout.etp,
                                              parallel_state.expert_tensor_parallel().rank()}) {
    parameters.init_random(5);
    exp_avg = test::hf_keyed_moments_for(parameters, 1);
    exp_avg_sq = test::hf_keyed_moments_for(parameters, 2);
  }
  dist::ParallelState parallel_state;
  model::Qwen3MoeParameters parameters;
  core::Tensor exp_avg, exp_avg_sq;
};

// Whether two ranks' buffers hold the same values.
bool same_state(const TpRank& a, const model::Qwen3MoeParameters& values, const core::Tensor& m1,
                const core::Tensor& m2) {
  return same(values.all_values(), a.parameters.all_values()) && same(m1, a.exp_avg) &&
         same(m2, a.exp_avg_sq);
}

// Saves `rank`'s state as a sharded checkpoint of iteration 6 into `dir`.
train::RankShard save_sharded(dist::Comm& world, TpRank& rank, const fs::path& dir) {
  const train::RankShard shard = train::plan_rank_shard(
      rank.parameters, train::checkpoint_shards(rank.parameters, rank.parallel_state.pool(),
                                                rank.parallel_state.expert_data_parallel()));
  std::unique_ptr<train::CheckpointStore> store;
  if (world.rank() == 0) store = std::make_unique<train::CheckpointStore>(dir, -1);
  train::SavingLayout layout;
  layout.world_size = world.size();
  layout.data_parallel = rank.parallel_state.layout().data_parallel_size;
  layout.expert_parallel = rank.parallel_state.layout().expert_model_parallel_size;
  layout.tensor_parallel = rank.parameters.tensor_parallel().size;
  layout.expert_tensor_parallel = rank.parameters.tensor_parallel().expert_size;
  const train::ShardSources sources{{{rank.parameters.all_values().data<float>(), false},
                                     {rank.exp_avg.data<float>(), false},
                                     {rank.exp_avg_sq.data<float>(), false}}};
  REQUIRE(train::save_sharded_checkpoint(world, store.get(), dir, rank.parameters, shard, sources,
                                         loop_state(6), layout));
  return shard;
}

struct Case {
  const char* recipe;
  std::int64_t heads;
  Layout layout;
};

// Every layout on 4 ranks the tests run: tp 2 with experts split (etp 2) or whole (etp 1, an
// EP group of 4 crossing the TP groups), tp 4, both model families.
const Case cases[] = {
    {"tiny_mock.yaml", 0, {2, 2, 2}},        {"tiny_mock.yaml", 0, {2, 1, 4}},
    {"tiny_mock.yaml", 0, {2, 1, 2}},        {"tiny_mock.yaml", 8, {4, 4, 1}},
    {"tiny_mock.yaml", 8, {4, 1, 2}},        {"tiny_hybrid_mock.yaml", 0, {2, 2, 2}},
    {"tiny_hybrid_mock.yaml", 0, {2, 1, 4}}, {"tiny_hybrid_mock.yaml", 8, {4, 4, 1}},
};

std::string describe(const Case& c) {
  return std::string(c.recipe) + (c.heads > 0 ? " (" + std::to_string(c.heads) + " heads)" : "") +
         ", tp " + std::to_string(c.layout.tp) + " etp " + std::to_string(c.layout.etp) + " ep " +
         std::to_string(c.layout.ep);
}

}  // namespace

TEST_CASE("a single-writer checkpoint written from TP pieces is the whole model's, byte for byte",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  REQUIRE(world.size() == 4);
  for (const Case& c : cases) {
    INFO(describe(c));
    const config::ModelArchitecture architecture = architecture_of(c.recipe, c.heads);
    const train::LoopState state = loop_state(9);
    const fs::path dir = shared_dir(world, "single");
    if (world.rank() == 0) {
      const model::Qwen3MoeParameters whole(architecture);
      whole.init_random(5);
      fs::create_directories(dir / "whole");
      train::write_training_checkpoint(dir / "whole", whole, test::hf_keyed_moments_for(whole, 1),
                                       test::hf_keyed_moments_for(whole, 2), state);
    }
    TpRank rank(world, architecture, c.layout);
    const parallel::WriterGathers gathers(rank.parallel_state);
    if (world.rank() == 0) fs::create_directories(dir / "pieces");
    if (gathers.takes_part()) {
      train::write_training_checkpoint(dir / "pieces", rank.parameters, rank.exp_avg,
                                       rank.exp_avg_sq, state, gathers.gathers(),
                                       /*write=*/world.rank() == 0);
    }
    world.barrier();
    if (world.rank() == 0) {
      for (const char* part : {"model/model.safetensors", "model/config.json",
                               "optimizer.safetensors", "state.json"}) {
        INFO(part);
        CHECK(file_bytes(dir / "pieces" / part) == file_bytes(dir / "whole" / part));
      }
    }
    // Every rank reads back exactly its pieces.
    const model::Qwen3MoeParameters reread(architecture, rank.parameters.expert_range(),
                                           core::DType::f32, core::Device::cpu,
                                           rank.parameters.tensor_parallel());
    core::Tensor exp_avg = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
    core::Tensor exp_avg_sq = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
    CHECK(
        train::read_training_checkpoint(dir / "whole", 9, reread, exp_avg, exp_avg_sq).iteration ==
        9);
    CHECK(same(reread.all_values(), rank.parameters.all_values()));
    CHECK(same(exp_avg, rank.exp_avg));
    CHECK(same(exp_avg_sq, rank.exp_avg_sq));
    world.barrier();
    if (world.rank() == 0) fs::remove_all(dir);
  }
}

TEST_CASE("sharded checkpoints from TP pieces write each element once and load under any layout",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  std::vector<Case> savers(std::begin(cases), std::end(cases));
  // Runs without TP (index format 1) save too, and the TP layouts read them.
  savers.push_back({"tiny_mock.yaml", 0, {1, 1, 2}});
  savers.push_back({"tiny_hybrid_mock.yaml", 0, {1, 1, 2}});
  savers.push_back({"tiny_mock.yaml", 8, {1, 1, 4}});
  savers.push_back({"tiny_hybrid_mock.yaml", 8, {1, 1, 1}});
  for (const Case& saver : savers) {
    INFO("saved by " << describe(saver));
    const config::ModelArchitecture architecture = architecture_of(saver.recipe, saver.heads);
    const fs::path dir = shared_dir(world, "sharded");
    TpRank saving(world, architecture, saver.layout);
    const train::RankShard shard = save_sharded(world, saving, dir);
    const fs::path folder = dir / train::CheckpointStore::folder_name(6);

    // Every element of the whole model written exactly once (the index's tiling checks the
    // rest), the pieces named as blocks under TP.
    std::int64_t written = shard.elements;
    world.all_reduce(std::span<std::int64_t>(&written, 1), dist::ReduceOp::sum);
    const model::Qwen3MoeParameters whole(architecture);
    std::int64_t elements = 0;
    for (const model::HfTensor& tensor : whole.hf_tensors()) elements += tensor.hf_numel();
    CHECK(written == elements);
    std::ifstream in(folder / train::sharded_index_name);
    const train::ShardedIndex index = train::parse_sharded_index(
        {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}, "index.json");
    CHECK(index.layout.tensor_parallel == saver.layout.tp);
    for (const train::IndexTensor& tensor : index.tensors)
      CHECK(tensor.blocks.empty() == (saver.layout.tp == 1));

    // An asynchronous save's snapshot writes the same bytes.
    const std::vector<float> snapshot =
        train::snapshot_rank_shard(shard, {{{saving.parameters.all_values().data<float>(), false},
                                            {saving.exp_avg.data<float>(), false},
                                            {saving.exp_avg_sq.data<float>(), false}}});
    const fs::path other = shared_dir(world, "snapshot");
    if (world.rank() == 0) fs::create_directories(other / "shards");
    world.barrier();
    REQUIRE(train::write_rank_shard(other, world.rank(), shard,
                                    train::snapshot_sources(shard, snapshot))
                .failure.empty());
    const std::string relative = train::rank_shard_path(world.rank());
    CHECK(file_bytes(other / relative) == file_bytes(folder / relative));

    // The whole model on one rank.
    if (world.rank() == 0) {
      whole.init_random(5);
      const model::Qwen3MoeParameters reread(architecture);
      core::Tensor m1 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
      core::Tensor m2 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
      CHECK(train::read_training_checkpoint(folder, 6, reread, m1, m2).iteration == 6);
      CHECK(same(reread.all_values(), whole.all_values()));
      CHECK(same(m1, test::hf_keyed_moments_for(whole, 1)));
      CHECK(same(m2, test::hf_keyed_moments_for(whole, 2)));
    }
    // Every layout of the same model on the 4 ranks.
    for (const Case& loader : cases) {
      if (std::string(loader.recipe) != saver.recipe || loader.heads != saver.heads) continue;
      INFO("loaded by " << describe(loader));
      TpRank loading(world, architecture, loader.layout);
      const model::Qwen3MoeParameters reread(architecture, loading.parameters.expert_range(),
                                             core::DType::f32, core::Device::cpu,
                                             loading.parameters.tensor_parallel());
      core::Tensor m1 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
      core::Tensor m2 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
      const parallel::ParameterRange everything{0, reread.num_parameters(), false, true};
      train::read_sharded_checkpoint(folder, 6, reread, m1, m2, {&everything, 1});
      CHECK(same_state(loading, reread, m1, m2));
    }
    world.barrier();
    if (world.rank() == 0) {
      fs::remove_all(dir);
      fs::remove_all(other);
    }
  }
}

TEST_CASE("a TP rank reads only the moments its distributed optimizer keeps", "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const config::ModelArchitecture architecture = architecture_of("tiny_hybrid_mock.yaml");
  const fs::path dir = shared_dir(world, "owned");
  TpRank saving(world, architecture, {2, 2, 2});
  save_sharded(world, saving, dir);
  TpRank loading(world, architecture, {2, 1, 4});
  const parallel::OptimizerShards shards =
      train::checkpoint_shards(loading.parameters, loading.parallel_state.pool(),
                               loading.parallel_state.expert_data_parallel());
  const model::Qwen3MoeParameters reread(architecture, loading.parameters.expert_range(),
                                         core::DType::f32, core::Device::cpu,
                                         loading.parameters.tensor_parallel());
  core::Tensor m1 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
  core::Tensor m2 = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
  train::read_sharded_checkpoint(dir / train::CheckpointStore::folder_name(6), 6, reread, m1, m2,
                                 shards.owned_ranges);
  CHECK(same(reread.all_values(), loading.parameters.all_values()));
  std::vector<char> owned(static_cast<std::size_t>(reread.num_parameters()), 0);
  for (const parallel::ParameterRange& range : shards.owned_ranges)
    std::fill_n(owned.begin() + range.offset, range.count, 1);
  std::int64_t wrong = 0, owned_count = 0;
  for (std::size_t i = 0; i < owned.size(); ++i) {
    const float expected1 = owned[i] ? loading.exp_avg.data<float>()[i] : 0.0f;
    const float expected2 = owned[i] ? loading.exp_avg_sq.data<float>()[i] : 0.0f;
    wrong += m1.data<float>()[i] != expected1 || m2.data<float>()[i] != expected2;
    owned_count += owned[i];
  }
  CHECK(owned_count > 0);
  CHECK(owned_count < reread.num_parameters());
  CHECK(wrong == 0);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

namespace {

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

train::ExportGroups export_groups(TpRank& rank) {
  return {&rank.parallel_state.tensor_parallel(), &rank.parallel_state.expert_tensor_parallel()};
}

}  // namespace

TEST_CASE("the HF export written in parallel from TP pieces is the whole model's, byte for byte",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  for (const Case& c : cases) {
    const config::ModelArchitecture architecture = architecture_of(c.recipe, c.heads);
    TpRank rank(world, architecture, c.layout);
    const std::uint64_t bf16_bytes =
        static_cast<std::uint64_t>(rank.parameters.all_values().numel()) * 2 *
        static_cast<std::uint64_t>(c.layout.tp);
    for (const model::StoredDType dtype : {model::StoredDType::bf16, model::StoredDType::f32}) {
      for (const std::uint64_t shard_bytes : {std::uint64_t{0}, bf16_bytes / 3}) {
        INFO(describe(c) << ", " << model::stored_dtype_name(dtype) << ", shards of "
                         << shard_bytes);
        const fs::path dir = shared_dir(world, "export");
        if (world.rank() == 0) {
          const model::Qwen3MoeParameters whole(architecture);
          whole.init_random(5);
          model::save_hf_checkpoint((dir / "single").string(), whole, dtype, shard_bytes);
        }
        const std::uint64_t written = train::write_hf_weights_in_parallel(
            world, dir / "pieces", rank.parameters, dtype, shard_bytes, export_groups(rank));
        CHECK(written > 0);  // every rank writes a share
        std::uint64_t total = written;
        world.all_reduce(&total, &total, 1, core::DType::i64, dist::ReduceOp::sum);
        if (world.rank() == 0) {
          const auto files = names_in(dir / "single");
          CHECK(names_in(dir / "pieces") == files);
          std::uint64_t bytes = 0;
          for (const std::string& name : files) {
            INFO(name);
            CHECK(file_bytes(dir / "pieces" / name) == file_bytes(dir / "single" / name));
            if (name.ends_with(".safetensors")) bytes += fs::file_size(dir / "pieces" / name);
          }
          CHECK(total == bytes);  // each byte written once
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(dir);
      }
    }
  }
}

TEST_CASE("a failed HF export write on one TP rank fails the export on every rank",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const config::ModelArchitecture architecture = architecture_of("tiny_hybrid_mock.yaml");
  TpRank rank(world, architecture, {2, 2, 2});
  const fs::path dir = shared_dir(world, "export_fails");
  const fs::path out = dir / "export";
  // Rank 2's first write fails; its TP partner keeps summing pieces with it until the end.
  if (world.rank() == 2) ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "0", 1);
  CHECK_THROWS_WITH(
      train::write_hf_weights_in_parallel(world, out, rank.parameters, model::StoredDType::bf16, 0,
                                          export_groups(rank)),
      Catch::Contains("rank 2: writing '") && Catch::Contains("No space left on device"));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  world.barrier();
  if (world.rank() == 0) CHECK(names_in(out).empty());
  train::write_hf_weights_in_parallel(world, out, rank.parameters, model::StoredDType::bf16, 0,
                                      export_groups(rank));
  if (world.rank() == 0) CHECK(names_in(out).count("model.safetensors") == 1);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}
