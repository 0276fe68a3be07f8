#include "dist/launch_env.hpp"

#include <catch2/catch.hpp>
#include <map>

#include "core/error.hpp"

using dyncp::dist::discover_launch_env;

namespace {
dyncp::dist::EnvLookup from(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("launch env: OpenMPI variables win over Slurm's", "[dist][env]") {
  const auto env = discover_launch_env(from({{"OMPI_COMM_WORLD_RANK", "3"},
                                             {"OMPI_COMM_WORLD_SIZE", "4"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                             {"SLURM_STEP_ID", "0"},
                                             {"SLURM_PROCID", "0"},
                                             {"SLURM_NTASKS", "8"}}));
  CHECK(env.source == "openmpi");
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
}

TEST_CASE("launch env: Slurm counts only inside a job step", "[dist][env]") {
  // A batch script sees SLURM_PROCID=0 and SLURM_NTASKS=N but no step id: not a rank.
  auto env = discover_launch_env(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}));
  CHECK(env.source == "default");
  CHECK(env.world_size == 1);
  env = discover_launch_env(
      from({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}}));
  CHECK(env.source == "slurm");
  CHECK(env.rank == 5);
  CHECK(env.world_size == 8);
}

TEST_CASE("launch env: PMIx, then torchrun, then a one-rank world", "[dist][env]") {
  CHECK(discover_launch_env(from({{"PMIX_RANK", "2"}, {"PMI_SIZE", "4"}})).rank == 2);
  const auto torchrun = discover_launch_env(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  CHECK(torchrun.source == "torchrun");
  CHECK(torchrun.world_size == 2);
  const auto plain = discover_launch_env(from({}));
  CHECK(plain.rank == 0);
  CHECK(plain.world_size == 1);
}

TEST_CASE("launch env: malformed values are usage errors", "[dist][env]") {
  REQUIRE_THROWS_WITH(discover_launch_env(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
                      Catch::Contains("RANK='x'"));
  REQUIRE_THROWS_WITH(discover_launch_env(from({{"RANK", "4"}, {"WORLD_SIZE", "2"}})),
                      Catch::Contains("rank 4 in a world of 2"));
}
