#pragma once
// A thread that runs host collectives in the order they were posted, so that on the CPU a
// collective overlaps the computation of the main thread (parallel/overlapped_gradient_reduce,
// parallel/overlapped_parameter_gather). MpiComm makes progress only inside MPI calls, so a
// transfer posted non-blocking from the main thread would mostly move inside its wait; this
// thread sits in the blocking call instead.
//
// The collectives must run on communicators of their own (split for this purpose: one thread
// at a time per communicator) and touch memory the main thread leaves alone until the task is
// finished (wait_until / wait_all). Needs MPI_THREAD_MULTIPLE, which dist::MpiRuntime asks for.
// A task that throws stops the later ones from running; the error is rethrown by the next
// wait, on the main thread.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace dyncp::parallel {

class CommunicationThread {
 public:
  CommunicationThread();
  ~CommunicationThread();  // finishes the queued tasks' running one, drops the rest, joins
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  // Queues a task; returns its ticket (1, 2, ... in posting order over the thread's life).
  std::uint64_t post(std::function<void()> task);
  // Returns once every task up to `ticket` has run; rethrows a task's error.
  void wait_until(std::uint64_t ticket);
  // Every task posted so far.
  void wait_all();
  // Tickets of the tasks that have run (for tests and the overlap counters).
  std::uint64_t finished() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t posted_ = 0;
  std::uint64_t finished_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace dyncp::parallel
