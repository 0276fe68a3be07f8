#include "dist/launch_env.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace dyncp::dist {

namespace {

std::optional<std::string> getenv_lookup(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

int parse_count(const EnvLookup& lookup, const std::string& name, int fallback) {
  const auto value = lookup(name);
  if (!value) return fallback;
  try {
    std::size_t used = 0;
    const int parsed = std::stoi(*value, &used);
    if (used != value->size() || parsed < 0) throw std::invalid_argument("bad");
    return parsed;
  } catch (const std::exception&) {
    core::throw_usage_error("environment variable " + name + "='" + *value +
                            "' is not a non-negative integer");
  }
}

}  // namespace

LaunchEnv discover_launch_env(const EnvLookup& lookup_in) {
  const EnvLookup lookup = lookup_in ? lookup_in : EnvLookup(getenv_lookup);
  LaunchEnv env;
  if (lookup("OMPI_COMM_WORLD_RANK")) {
    env.source = "openmpi";
    env.rank = parse_count(lookup, "OMPI_COMM_WORLD_RANK", 0);
    env.world_size = parse_count(lookup, "OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = parse_count(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (lookup("SLURM_STEP_ID") && lookup("SLURM_PROCID")) {
    env.source = "slurm";
    env.rank = parse_count(lookup, "SLURM_PROCID", 0);
    // The step's task count; SLURM_NTASKS is the job's and differs for a smaller step.
    env.world_size = parse_count(
        lookup, lookup("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 1);
    env.local_rank = parse_count(lookup, "SLURM_LOCALID", 0);
  } else if (lookup("PMIX_RANK") || lookup("PMI_RANK")) {
    env.source = "pmix";
    env.rank = parse_count(lookup, lookup("PMIX_RANK") ? "PMIX_RANK" : "PMI_RANK", 0);
    env.world_size = parse_count(lookup, "PMI_SIZE", 1);
    env.local_rank = parse_count(lookup, "PMIX_LOCAL_RANK", 0);
  } else if (lookup("RANK")) {
    env.source = "torchrun";
    env.rank = parse_count(lookup, "RANK", 0);
    env.world_size = parse_count(lookup, "WORLD_SIZE", 1);
    env.local_rank = parse_count(lookup, "LOCAL_RANK", 0);
  }
  if (env.world_size < 1 || env.rank >= env.world_size) {
    core::throw_usage_error("launcher environment (" + env.source + ") gives rank " +
                            std::to_string(env.rank) + " in a world of " +
                            std::to_string(env.world_size));
  }
  return env;
}

}  // namespace dyncp::dist
