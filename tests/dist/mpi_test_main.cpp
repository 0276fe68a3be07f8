// Catch2 main for the multi-rank tests: every rank runs every test case in declaration
// order (collectives must match), then the ranks agree on one verdict so that a failure on
// any rank fails every rank's exit status.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/log.hpp"
#include "dist/mpi_comm.hpp"
#include "mpi_test_world.hpp"

namespace dyncp::dist::testing {
Comm* world_for_tests = nullptr;
Comm& test_world() {
  return *world_for_tests;
}
}  // namespace dyncp::dist::testing

int main(int argc, char** argv) {
  dyncp::dist::MpiRuntimeOptions options;
  options.collective_timeout_seconds = 30;  // a diverged test case aborts instead of hanging
  dyncp::dist::MpiRuntime runtime(&argc, &argv, options);
  dyncp::core::setup_logging({runtime.world_rank(), runtime.world_size(), false});
  int failed = 0;
  {
    auto world = runtime.world("world");
    dyncp::dist::testing::world_for_tests = world.get();
    Catch::Session session;
    const int status = session.applyCommandLine(argc, argv);
    failed = status != 0 ? 1 : session.run();
    std::int32_t any_failed = failed != 0 ? 1 : 0;
    world->all_reduce(std::span<std::int32_t>(&any_failed, 1), dyncp::dist::ReduceOp::max);
    if (any_failed != 0 && failed == 0) failed = 1;
    dyncp::dist::testing::world_for_tests = nullptr;
  }
  return failed;
}
