#pragma once
// What the emulated runtime counts, for tests that prove where work runs and what crosses to
// the host: kernel launches (in total and by the kernel's source name; cuBLASLt products count
// as "cublasLtMatmul") and device-to-host copies (cudaMemcpy, cudaMemcpyAsync, cudaMemcpy2D
// with a device source and a host destination). Counters only grow; tests take differences.
// And the order streams run their work in (kernels/emulation/streams.hpp).

#include <string_view>

struct CUstream_st;

namespace dyncp::emulation {

struct RuntimeCounters {
  unsigned long long launches = 0;
  unsigned long long device_to_host_copies = 0;
  unsigned long long device_to_host_bytes = 0;
};

RuntimeCounters runtime_counters();
// Launches of kernels whose name starts with `prefix` (e.g. "grouped_rows_kernel").
unsigned long long launches_named(std::string_view prefix);

// immediate: work runs when enqueued (the default). random: queued work runs at
// synchronisation points, the next stream to advance drawn from a generator seeded with the
// parameter. delay_one: the stream with creation index `parameter` (0: the default stream)
// advances only when no other stream can. eager_one: the reverse, that stream advances
// whenever it can and the others only when it cannot (eager:0 runs the compute stream ahead of
// every communication stream, so a consumer that does not wait for a transfer's event reads
// its buffer before the transfer landed). The environment sets it at start-up:
// DYNCP_EMULATED_STREAM_ORDER=immediate | random:SEED | delay:INDEX | eager:INDEX. Switching
// runs all queued work first.
enum class StreamOrder { immediate, random, delay_one, eager_one };
void set_stream_order(StreamOrder order, unsigned long long parameter);
// The order in force and its parameter (tests restore it after changing it).
StreamOrder stream_order(unsigned long long* parameter = nullptr);
// A stream's creation index (0: the default stream), for delay_one and eager_one.
int stream_index(CUstream_st* stream);

}  // namespace dyncp::emulation
