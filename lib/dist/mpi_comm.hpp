#pragma once
// OpenMPI as the bootstrap and the CPU collective backend. MpiRuntime owns MPI's lifetime:
// construct it once at the top of main (MPI_Init_thread; a plain launch without mpirun or
// srun is a one-rank world), take communicators from world(), and destroy every communicator
// before the runtime (its destructor calls MPI_Finalize). It also installs abort_job's
// job-wide abort (MPI_Abort on MPI_COMM_WORLD) and the collective watchdog shared by every
// communicator split from world().
//
// MpiComm itself lives in mpi_comm.cpp: mpi.h never reaches a header.
//
// Reductions never use MPI's own reduction operations:
//  - OpenMPI's MPI_Allreduce / MPI_Reduce_scatter choose their algorithm (and so the order of
//    floating-point additions) by message and communicator size (coll/tuned decision rules);
//    the MPI standard only *advises* that repeated calls give the same result.
//  - OpenMPI 4.1.4 (Debian 12) on an AVX-512 machine returned wrong MPI_SUM results for
//    MPI_UINT8_T from 1000 elements on (correct with OMPI_MCA_op=^avx: its op/avx component).
// So MPI only moves data, and each rank combines blocks itself, in rank order:
//   all_reduce, small (count x size <= 16 Ki elements): all-gather every contribution, then
//     each rank reduces them in rank order;
//   all_reduce, large: all-to-all-v of n/p blocks (rank j receives every rank's block j), rank j
//     reduces its block in rank order, then all-gather-v of the reduced blocks. Same bandwidth
//     as a ring all-reduce, and bit-identical to the small path;
//   reduce_scatter: all-to-all of the blocks, then the rank-order reduction.
// Every rank gets the same bits, run after run, whatever the message size.
//
// Counts go to MPI as int: one call moves at most 2^31 - 1 elements (bucket larger buffers);
// a larger count is a runtime error, never a silent truncation.

#include <memory>
#include <string>

#include "dist/comm.hpp"

namespace dyncp::dist {

struct MpiRuntimeOptions {
  // A collective that takes longer than this aborts the job (0 disables). Generous by default:
  // the first step also creates communicators and loads data.
  double collective_timeout_seconds = 600.0;
};

class MpiRuntime {
 public:
  // argc/argv may be null. Throws a runtime error when called a second time in a process.
  MpiRuntime(int* argc, char*** argv, const MpiRuntimeOptions& options = {});
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The thread level MPI granted ("multiple", "serialized", ...).
  const std::string& thread_support() const { return thread_support_; }
  const std::shared_ptr<CollectiveWatchdog>& watchdog() const { return watchdog_; }

  // A new communicator over every rank (a duplicate of MPI_COMM_WORLD: its traffic never
  // mixes with another world() communicator's).
  std::unique_ptr<Comm> world(std::string name = "world");

 private:
  // The watchdog threads' status exchange (dist/watchdog.hpp), over a duplicate of
  // MPI_COMM_WORLD that only they use; needs MPI_THREAD_MULTIPLE and more than one rank.
  void install_peer_status();

  int world_rank_ = 0;
  int world_size_ = 1;
  std::string thread_support_;
  std::shared_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace dyncp::dist
