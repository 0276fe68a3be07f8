// dyncp-train: the command line. Parses options (CLI11), loads and resolves the recipe, and
// maps every failure to a message and an exit code: 0 ok, 2 usage/config/data, 1 runtime.

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#ifdef DYNCP_CUDA_BACKEND
#include "dist/nccl_comm.hpp"
#include "ops/cuda/cuda_backend.hpp"
#endif
#include "../cli_main.hpp"
#include "config/config_loader.hpp"
#include "config/config_reference.hpp"
#include "config/resolve.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "core/version.hpp"
#include "dist/abort.hpp"
#include "dist/launch_env.hpp"
#include "dist/mpi_comm.hpp"
#include "train/dry_run.hpp"
#include "train/signal_flag.hpp"
#include "train/trainer.hpp"

namespace {

struct Options {
  std::string config_path;
  std::vector<std::string> overrides;
  std::optional<std::int64_t> world_size;
  bool dry_run = false;
  bool print_config = false;
  std::string print_format = "native";
  bool print_config_reference = false;
  bool verbose = false;
};

int run(const Options& options) {
  using namespace dyncp;
  // First, before any slow start-up work: a SIGTERM or SIGUSR1 during start-up then stops the
  // run cleanly (exit 0) at the first step boundary instead of killing it with status 143.
  train::install_stop_signal_handlers();
  // A checkpoint write past `ulimit -f` then fails the save, naming the file, instead of
  // killing the run with SIGXFSZ.
  core::ignore_file_size_limit_signal();
  if (options.print_config_reference) {
    std::cout << config::generate_config_reference();
    return 0;
  }
  if (options.print_format != "native" && !options.print_config) {
    core::throw_usage_error("--format " + options.print_format +
                            " is the layout of --print-config; add --print-config");
  }
  if (options.config_path.empty()) {
    core::throw_usage_error(
        "--config FILE is required (a recipe YAML, e.g. "
        "configs/demo/tiny_moe.yaml); see --help");
  }
  const auto launch = dist::discover_launch_env();
  const std::int64_t world_size = options.world_size.value_or(launch.world_size);
  core::setup_logging({.rank = launch.rank,
                       .world_size = static_cast<int>(world_size),
                       .verbose = options.verbose});

  auto config = config::load_config_file(options.config_path, options.overrides);
  config::resolve_config(config, world_size);

  for (const auto& warning : config::config_warnings(config)) spdlog::warn("{}", warning);

  // Every rank validates (a bad config fails everywhere), only rank 0 prints.
  const bool printer = launch.rank == 0;
  if (options.print_config && printer) {
    if (options.print_format == "bridge") {
      std::cout << config::dump_bridge_yaml(config);
    } else {
      std::cout << "# dyncp-train " << core::version_string
                << ": resolved configuration for a world of " << world_size << " ranks\n"
                << config::dump_config_yaml(config);
    }
  }
  const auto missing = config::unbuilt_features(config);
  if (options.dry_run) {
    if (!printer) return 0;
    std::cout << "configuration is valid: " << options.config_path << " (world size " << world_size
              << ", from " << (options.world_size ? "--world-size" : launch.source) << ")\n";
    std::cout << config::describe_run(config) << config::describe_layout(config);
    for (const auto& line : missing) std::cout << "note: not built yet: " << line << "\n";
    // A schedule that breaks the contract is a scheduler bug: a runtime failure.
    return train::write_dry_run_report(std::cout, config) ? 0 : 1;
  }
  if (options.print_config) return 0;

  if (!missing.empty()) {
    std::string message = "the recipe asks for features that are not built yet:";
    for (const auto& line : missing) message += "\n  " + line;
    throw core::Error(core::ErrorKind::config, "", message);
  }
  if (world_size != launch.world_size) {
    core::throw_usage_error(
        "--world-size " + std::to_string(world_size) + " differs from the launched world (" +
        std::to_string(launch.world_size) + " ranks): it is for --dry-run and --print-config only");
  }

  // torchrun (or anything else setting only RANK / WORLD_SIZE) starts N processes that MPI sees
  // as N one-rank worlds; say so rather than fail later on the layout of a 1-rank pool.
  if (launch.source == "torchrun" && launch.world_size > 1) {
    core::throw_usage_error(
        "RANK / WORLD_SIZE say this is rank " + std::to_string(launch.rank) + " of " +
        std::to_string(launch.world_size) +
        " (torchrun style), but dyncp-train is an MPI program and torchrun cannot start its "
        "world: launch it with `mpirun -np " +
        std::to_string(launch.world_size) +
        " dyncp-train ...` or, under Slurm, `srun --mpi=pmix -n " +
        std::to_string(launch.world_size) + " dyncp-train ...`");
  }

#ifdef DYNCP_CUDA_BACKEND
  // The GPU path (train/training_device.hpp decides whether this run uses it).
  if (config.dist.device != config::Device::cpu && ops::cuda::install_backend_if_visible()) {
    dist::install_nccl_device_comms();
  }
#endif

  // Training: MPI is the bootstrap; communicators are destroyed before the runtime.
  dist::MpiRuntime runtime(
      nullptr, nullptr,
      {.collective_timeout_seconds =
           60.0 * static_cast<double>(config.dist.distributed_timeout_minutes)});
  core::setup_logging({.rank = runtime.world_rank(),
                       .world_size = runtime.world_size(),
                       .verbose = options.verbose});
  try {
    // The CPU path's overlapped gradient buckets are summed on a thread of their own
    // (docs/dist.md): MPI must allow calls from two threads at once.
    if (config.ddp.overlap_grad_reduce && runtime.world_size() > 1 &&
        runtime.thread_support() != "multiple") {
      core::throw_config_error("ddp.overlap_grad_reduce",
                               "true: this MPI grants thread support '" + runtime.thread_support() +
                                   "', the overlapped reduction needs 'multiple' (set "
                                   "ddp.overlap_grad_reduce=false)");
    }
    auto world = runtime.world();
    train::run_training(config, *world);
  } catch (const core::Error& error) {
    // One rank failing must not leave the others waiting in a collective.
    if (runtime.world_size() > 1) dist::abort_job(error.what(), error.exit_code());
    throw;
  } catch (const std::exception& error) {
    if (runtime.world_size() > 1) dist::abort_job(error.what(), 1);
    throw;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dyncp-train: fine-tune Qwen-style MoE models on packed SFT data with dynamic "
      "context parallelism"};
  Options options;
  app.add_option("--config", options.config_path, "Recipe YAML file");
  app.add_option("overrides", options.overrides, "key.path=value overrides, after the options");
  app.add_flag("--dry-run", options.dry_run,
               "Validate, print the resolved settings, the parallel layout, a schedule "
               "preview of the first step and a per-rank memory estimate, and exit");
  app.add_flag("--print-config", options.print_config,
               "Print the resolved configuration as YAML (it loads back to the same config)");
  app.add_option("--format", options.print_format,
                 "--print-config layout: native (this program's keys) or bridge (a "
                 "Megatron-Bridge ConfigContainer dump)")
      ->check(CLI::IsMember({"native", "bridge"}));
  app.add_option("--world-size", options.world_size,
                 "Number of ranks (default: from the launcher's environment)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_flag("--print-config-reference", options.print_config_reference,
               "Print the generated key reference (the end of docs/config.md)");
  app.add_flag("--verbose", options.verbose,
               "Debug-level log on every rank (arena high-water marks, group creation)");
  app.set_version_flag("--version", dyncp::core::version_string);

  return dyncp::apps::parse_and_run(app, argc, argv, "dyncp-train", [&] { return run(options); });
}
