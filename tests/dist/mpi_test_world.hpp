#pragma once
// The world communicator of the multi-rank test binary (set up by mpi_test_main.cpp).

#include "dist/comm.hpp"

namespace dyncp::dist::testing {
Comm& test_world();
}  // namespace dyncp::dist::testing
