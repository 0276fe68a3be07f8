#pragma once
// Streams and events of the emulated runtime, and the order their work runs in (internal to
// kernels/emulation/; the switch is in emulation_counters.h).
//
// Immediate order (the default): work runs when it is enqueued, in program order. The deferred
// orders queue each stream's work and run it only when the host synchronises with something
// that needs it (a stream, an event, the device, a synchronous copy, cudaFree, an NCCL call on
// the stream), choosing at every step which stream advances: at random from a seed, any stream
// but one, which runs only when nothing else can, or one stream whenever it can and the others
// only when it cannot. An NCCL call reads its inputs when it is called, after the work its
// stream was ordered behind, and its results land in device memory as work of its stream, so
// a consumer on another stream sees them only once it waited for an event recorded after the
// call. A stream's work waits for the events it
// was told to wait for (cudaStreamWaitEvent) and for nothing else, as on a GPU with
// non-blocking streams, so a missing event dependency makes a consumer read its input before
// the producer ran: a wrong number instead of a lucky pass.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "cuda_runtime_api.h"

struct CUstream_st {
  unsigned flags = 0;
  int index = 0;               // creation order; 0 is the default stream
  std::uint64_t enqueued = 0;  // operations so far, for events
  std::uint64_t executed = 0;  // operations that have run
  struct Work {
    std::uint64_t sequence;
    CUstream_st* waits_for;  // null, or run only once that stream has executed `until`
    std::uint64_t until;
    std::function<void()> run;
  };
  std::deque<Work> queue;  // deferred orders only
  struct PendingCopy {
    std::uint64_t sequence;
    void* destination;
    std::vector<unsigned char> bytes;
  };
  std::vector<PendingCopy> pending;  // immediate order: copies to the host not yet landed
};

struct CUevent_st {
  unsigned flags = 0;
  cudaStream_t stream = nullptr;
  std::uint64_t sequence = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time{};
};

namespace dyncp::emulation {

// True while work is queued rather than run at once.
bool deferred_order();
// Enqueues `run` on `stream` (after `waits_for` reaches `until`, when given) and returns its
// sequence number; immediate order runs it before returning. Takes the runtime's lock itself:
// call it without holding it.
std::uint64_t submit(cudaStream_t stream, std::function<void()> run,
                     CUstream_st* waits_for = nullptr, std::uint64_t until = 0);
// Runs queued work until `stream` has executed `until` (every queued operation when 0).
void drain(cudaStream_t stream, std::uint64_t until = 0);
void drain_all();

// The runtime's registry, for the scheduler (runtime.cpp).
CUstream_st& resolve_stream(cudaStream_t stream);
std::vector<CUstream_st*> all_streams();  // the default stream first, then creation order

}  // namespace dyncp::emulation
