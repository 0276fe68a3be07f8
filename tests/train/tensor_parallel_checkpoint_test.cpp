// Checkpoints and HF exports under tensor parallelism (mpirun, 4 ranks): whatever pieces the
// ranks hold (tp 2 and 4, experts whole or split over the expert-TP group, with EP), the
// single-writer checkpoint is byte for byte the one the whole model writes, and every layout
// reads back exactly its pieces of the saved state.

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "checkpoint_test_moments.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "mpi_test_world.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/whole_model_gathers.hpp"
#include "train/training_checkpoint.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

// The smoke recipe's model; `heads` > 0 sets the attention heads (and K/V heads = heads / 2),
// so that tp 4 divides them.
config::ModelArchitecture architecture_of(const std::string& recipe, std::int64_t heads = 0) {
  auto config =
      config::load_config_file(std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/" + recipe, {});
  config::resolve_config(config, 4);
  auto architecture = config.model.architecture;
  if (heads > 0) {
    architecture.num_attention_heads = heads;
    architecture.num_key_value_heads = heads / 2;
    if (architecture.is_hybrid()) architecture.linear_num_key_heads = 4;
  }
  architecture.resolve();
  return architecture;
}

fs::path shared_dir(dist::Comm& world, const std::string& name) {
  std::int64_t pid = world.rank() == 0 ? ::getpid() : 0;
  world.broadcast(std::span<std::int64_t>(&pid, 1), 0);
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_tp_ckpt_" + name + "_" + std::to_string(pid));
  if (world.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world.barrier();
  return dir;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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

train::LoopState loop_state(std::int64_t iteration) {
  train::LoopState state;
  state.iteration = iteration;
  state.consumed_samples = 16 * iteration;
  state.lr_schedule.max_lr = 1e-3;
  state.lr_schedule.decay_iters = 100;
  return state;
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
