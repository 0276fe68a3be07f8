// A small multi-rank program that fails on purpose, run by expect_job_abort.sh:
//   failure_driver throw  the last rank throws a runtime error while the others wait in a
//                         barrier; main's catch calls abort_job, which must end every rank.
//   failure_driver hang   the last rank never reaches the barrier; the others' watchdog
//                         (2 s) must abort the job, naming the waiting rank and the call.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "dist/abort.hpp"
#include "dist/mpi_comm.hpp"

namespace {

void run(dyncp::dist::MpiRuntime& runtime, const std::string& mode) {
  auto world = runtime.world();
  world->barrier();
  const bool failing_rank = world->rank() == world->size() - 1;
  if (failing_rank && mode == "throw") {
    dyncp::core::throw_runtime_error("simulated failure in rank " + std::to_string(world->rank()) +
                                     "'s step");
  }
  if (failing_rank && mode == "hang") {
    std::this_thread::sleep_for(std::chrono::seconds(300));
  }
  world->barrier();  // never completes: the failing rank is gone or hung
  std::puts("unreachable: the barrier completed");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "hang") {
    std::fprintf(stderr, "usage: failure_driver throw|hang\n");
    return 2;
  }
  dyncp::dist::MpiRuntimeOptions options;
  options.collective_timeout_seconds = mode == "hang" ? 2.0 : 600.0;
  dyncp::dist::MpiRuntime runtime(&argc, &argv, options);
  try {
    run(runtime, mode);
  } catch (const dyncp::core::Error& error) {
    dyncp::dist::abort_job(error.what(), error.exit_code());
  }
  return 0;
}
