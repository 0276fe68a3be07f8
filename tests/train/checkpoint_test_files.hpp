#pragma once
// What the multi-rank checkpoint and export tests share: the smoke recipes' models, one scratch
// folder for every rank of a run, a loop state to save, and a file's bytes.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "dist/comm.hpp"
#include "train/loop_state.hpp"

namespace dyncp::test {

// The model of configs/smoke/<recipe>; `heads` > 0 sets the attention heads (K/V heads =
// heads / 2, and 4 DeltaNet key heads in hybrids) so that tp 4 divides them.
inline config::ModelArchitecture smoke_architecture(const std::string& recipe,
                                                    std::int64_t heads = 0) {
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

// One empty folder for every rank of `world`, named `prefix`_`name`_<rank 0's pid>.
inline std::filesystem::path shared_dir(dist::Comm& world, const std::string& prefix,
                                        const std::string& name) {
  std::int64_t pid = world.rank() == 0 ? ::getpid() : 0;
  world.broadcast(std::span<std::int64_t>(&pid, 1), 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(pid));
  if (world.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  world.barrier();
  return dir;
}

// The loop state of a run at `iteration` (16 samples a step, a 100-step decay to 1e-3).
inline train::LoopState loop_state(std::int64_t iteration) {
  train::LoopState state;
  state.iteration = iteration;
  state.consumed_samples = 16 * iteration;
  state.lr_schedule.max_lr = 1e-3;
  state.lr_schedule.decay_iters = 100;
  return state;
}

inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace dyncp::test
