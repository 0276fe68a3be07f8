#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

namespace dyncp::core {

bool use_colour_output() {
  // Under mpirun stdout is a pty even when the job's output goes to a file, so launched ranks
  // never colour their lines.
  const bool launched = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ||
                        std::getenv("SLURM_STEP_ID") != nullptr ||
                        std::getenv("PMIX_RANK") != nullptr;
  return isatty(STDERR_FILENO) != 0 && std::getenv("CI") == nullptr && !launched;
}

void setup_logging(const LogSetup& setup) {
  auto mode = use_colour_output() ? spdlog::color_mode::automatic : spdlog::color_mode::never;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(mode);
  auto logger = std::make_shared<spdlog::logger>("dyncp", sink);
  const std::string rank_tag =
      setup.world_size > 1 ? fmt::format("[rank {}/{}]", setup.rank, setup.world_size) : "";
  logger->set_pattern("%^[%H:%M:%S.%e] [%l]%$" + rank_tag + " %v");
  if (setup.verbose) {
    logger->set_level(spdlog::level::debug);
  } else {
    logger->set_level(setup.rank == 0 ? spdlog::level::info : spdlog::level::warn);
  }
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace dyncp::core
