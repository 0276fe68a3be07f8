// The HF export written by the ranks holding its tensors (train/hf_export_writer.hpp), under
// mpirun with 4 ranks: for per-expert (Qwen3-MoE) and fused (Qwen3.5) expert tensors, EP 1, 2
// and 4, bf16 and fp32, one file and several, the folder is byte for byte the one
// model::save_hf_checkpoint writes from the whole model on one rank; every rank writes a share;
// a failed write on one rank fails the export on every rank, naming the rank and the file, and
// publishes no file.

#include "train/hf_export_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "checkpoint_test_files.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "model/hf_checkpoint.hpp"
#include "mpi_test_world.hpp"
#include "parallel/expert_gather.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

config::ModelArchitecture architecture_of(const std::string& recipe) {
  return test::smoke_architecture(recipe);
}

fs::path shared_dir(dist::Comm& world, const std::string& name) {
  return test::shared_dir(world, "dyncp_hf_export", name);
}

using test::file_bytes;

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

std::uint64_t safetensors_bytes(const fs::path& dir) {
  std::uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") bytes += fs::file_size(entry.path());
  return bytes;
}

// A rank of EP `expert_parallel` with its slice of the model, seeded like every other layout.
struct ExportingRank {
  ExportingRank(dist::Comm& world, const config::ModelArchitecture& architecture,
                int expert_parallel)
      : parallel_state(world, dist::layout_for_world(world.size(), 1, expert_parallel, false, 1)),
        parameters(architecture, parallel::local_expert_range(architecture.num_experts,
                                                              parallel_state.expert_parallel())) {
    parameters.init_random(7);
  }
  dist::ParallelState parallel_state;
  model::Qwen3MoeParameters parameters;
};

}  // namespace

TEST_CASE("the ranks holding the tensors write the single writer's HF export byte for byte",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  for (const std::string recipe : {"tiny_mock.yaml", "tiny_hybrid_mock.yaml"}) {
    const config::ModelArchitecture architecture = architecture_of(recipe);
    INFO(recipe << " (" << architecture.model_type << ")");
    // The whole model on rank 0, as dyncp-export or a one-rank run holds it.
    const model::Qwen3MoeParameters whole(architecture, model::ExpertRange{});
    whole.init_random(7);
    const std::uint64_t bf16_bytes = static_cast<std::uint64_t>(whole.all_values().numel()) * 2;
    for (const model::StoredDType dtype : {model::StoredDType::bf16, model::StoredDType::f32}) {
      // One file, and files of about a third of the weights (model-0000k-of-00003 + index).
      for (const std::uint64_t shard_bytes : {std::uint64_t{0}, bf16_bytes / 3}) {
        const fs::path dir = shared_dir(world, "same");
        if (world.rank() == 0)
          model::save_hf_checkpoint((dir / "single").string(), whole, dtype, shard_bytes);
        for (const int ep : {1, 2, 4}) {
          INFO("EP " << ep << ", " << model::stored_dtype_name(dtype) << ", shards of "
                     << shard_bytes);
          const ExportingRank rank(world, architecture, ep);
          const fs::path out = dir / ("ep" + std::to_string(ep));
          const std::uint64_t written =
              train::write_hf_weights_in_parallel(world, out, rank.parameters, dtype, shard_bytes);
          CHECK(written > 0);  // every rank writes its share
          std::uint64_t total = written, most = written;
          world.all_reduce(&total, &total, 1, core::DType::i64, dist::ReduceOp::sum);
          world.all_reduce(&most, &most, 1, core::DType::i64, dist::ReduceOp::max);
          if (world.rank() == 0) {
            const auto files = names_in(dir / "single");
            CHECK(names_in(out) == files);
            CHECK(files.count("model.safetensors.index.json") == (shard_bytes > 0 ? 1 : 0));
            for (const std::string& name : files) {
              INFO(name);
              CHECK(file_bytes(out / name) == file_bytes(dir / "single" / name));
            }
            CHECK(total == safetensors_bytes(out));  // each byte written once
            CHECK(most < total);
          }
          world.barrier();
        }
        if (world.rank() == 0) fs::remove_all(dir);
      }
    }
  }
}

TEST_CASE("a failed HF export write on one rank fails the export on every rank",
          "[mpi][checkpoint]") {
  dist::Comm& world = dist::testing::test_world();
  const config::ModelArchitecture architecture = architecture_of("tiny_mock.yaml");
  const ExportingRank rank(world, architecture, 2);
  const fs::path dir = shared_dir(world, "fails");
  const std::uint64_t bf16_bytes = static_cast<std::uint64_t>(
      model::Qwen3MoeParameters(architecture, model::ExpertRange{}).all_values().numel() * 2);
  const fs::path out = dir / "export";
  // Rank 2's first write fails (the header of the third file, which it creates).
  if (world.rank() == 2) ::setenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES", "0", 1);
  CHECK_THROWS_WITH(train::write_hf_weights_in_parallel(world, out, rank.parameters,
                                                        model::StoredDType::bf16, bf16_bytes / 3),
                    Catch::Contains("rank 2: writing '") && Catch::Contains("model-00003-of-") &&
                        Catch::Contains("No space left on device"));
  ::unsetenv("DYNCP_FAULT_ENOSPC_AFTER_BYTES");
  world.barrier();
  if (world.rank() == 0) {
    CHECK(names_in(out).empty());  // no file published, no partial file left
  }
  // The next export goes through.
  train::write_hf_weights_in_parallel(world, out, rank.parameters, model::StoredDType::bf16,
                                      bf16_bytes / 3);
  if (world.rank() == 0) CHECK(names_in(out).count("model.safetensors.index.json") == 1);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}
