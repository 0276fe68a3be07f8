#pragma once
// Rank, world size and local rank as the launcher advertises them, read from the environment
// before (or without) MPI. Order, first match wins (docs/operations.md, "Launchers"):
//   1. OpenMPI:  OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK
//   2. Slurm:    SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, only inside a job step
//                (SLURM_STEP_ID set): a batch script, or mpirun inside sbatch, sees
//                SLURM_PROCID=0 for every process.
//   3. PMIx/PMI: PMIX_RANK or PMI_RANK (+ PMI_SIZE when present)
//   4. torchrun: RANK / WORLD_SIZE / LOCAL_RANK
//   otherwise a one-rank world.

#include <functional>
#include <optional>
#include <string>

namespace dyncp::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string source = "default";  // which launcher's variables were used
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// `lookup` defaults to getenv; tests pass a map.
LaunchEnv discover_launch_env(const EnvLookup& lookup = {});

}  // namespace dyncp::dist
