#pragma once
// Process-wide logging through spdlog: one logger per process with the rank in the pattern.
// Rank 0 logs info and above; other ranks log warnings and errors only.

#include <spdlog/spdlog.h>

namespace dyncp::core {

struct LogSetup {
  int rank = 0;
  int world_size = 1;
  bool verbose = false;  // debug level on every rank
};

// Idempotent; safe to call again once the rank is known (e.g. after MPI_Init).
void setup_logging(const LogSetup& setup);

// Colour only when stdout is a terminal and CI is unset.
bool use_colour_output();

}  // namespace dyncp::core
