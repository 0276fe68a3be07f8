#pragma once
// A one-rank communicator without MPI, on host buffers: every collective is a copy. For
// single-rank runs and for unit tests of code written against Comm (CP attention, expert
// dispatch, gradient sync) in binaries that do not start MPI. Counters count calls and, as
// for any one-rank communicator, zero bytes.

#include <memory>
#include <string>

#include "dist/comm.hpp"

namespace dyncp::dist {

std::unique_ptr<Comm> make_self_comm(std::string name = "self");

}  // namespace dyncp::dist
