#pragma once
// Taking the whole job down when one rank cannot go on. A rank that throws out of main, or
// whose collective watchdog expires, calls abort_job: it logs the message with this rank,
// runs the registered abort actions (NCCL communicators abort themselves there) and then the
// job-wide abort (MPI_Abort once MPI is up; without MPI the process just exits). mpirun and
// srun then stop every other rank, so the job ends within seconds, non-zero, and the log says
// which rank failed and why.

#include <cstddef>
#include <functional>
#include <string>

namespace dyncp::dist {

// Never returns. Safe to call from any thread; a second concurrent call waits for the first.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

// Actions run by abort_job before the job-wide abort, e.g. ncclCommAbort on a live
// communicator. Registration is RAII: the action is removed when the handle is destroyed.
class AbortActionRegistration {
 public:
  explicit AbortActionRegistration(std::function<void()> action);
  ~AbortActionRegistration();
  AbortActionRegistration(const AbortActionRegistration&) = delete;
  AbortActionRegistration& operator=(const AbortActionRegistration&) = delete;

 private:
  std::size_t id_;
};

// The job-wide abort installed by the MPI runtime; nullptr restores the plain process exit.
using JobAbortFunction = void (*)(int exit_code);
void set_job_abort_function(JobAbortFunction function);

// Rank and world size used in abort messages (set by the MPI runtime; before that the
// launcher's environment is used).
void set_abort_rank(int rank, int world_size);

}  // namespace dyncp::dist
