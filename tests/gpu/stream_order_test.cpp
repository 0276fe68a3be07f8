// The emulated runtime's stream orders (kernels/emulation/streams.hpp): a consumer on one
// stream that waits for its producer's event reads the producer's result under every seeded
// interleaving and with the producer delayed as long as possible; with the event removed the
// delayed order makes it read the buffer before the producer wrote it, a wrong number rather
// than a lucky pass. Emulation only (the orders are the emulator's).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gpu_test.hpp"
#ifdef DYNCP_CUDA_EMULATION
#include "emulation_counters.h"
#endif

namespace dyncp::gpu_test {
namespace {

#ifdef DYNCP_CUDA_EMULATION

__global__ void fill_value(float* out, float value, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
}

__global__ void add_one(const float* in, float* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i] + 1.0f;
}

// Sets nothing itself; puts back the order in force (the environment's, under ctest's
// stream-order runs of this binary) when the test ends.
struct RestoreOrder {
  unsigned long long parameter = 0;
  emulation::StreamOrder kind = emulation::stream_order(&parameter);
  ~RestoreOrder() { emulation::set_stream_order(kind, parameter); }
};

struct Streams {
  cudaStream_t producer = nullptr, consumer = nullptr;
  cudaEvent_t done = nullptr;
  Streams() {
    cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  }
  ~Streams() {
    cudaEventDestroy(done);
    cudaStreamDestroy(consumer);
    cudaStreamDestroy(producer);
  }
};

// Producer writes 5 into x on one stream; the consumer writes x + 1 into y on another.
std::vector<float> produce_consume(Streams& s, bool with_event) {
  const int n = 64;
  DeviceBuffer<float> x(std::vector<float>(n, 0.0f)), y(std::vector<float>(n, 0.0f));
  DYNCP_LAUNCH(fill_value, 1, 32, 0, s.producer)(x.get(), 5.0f, n);
  if (with_event) {
    cudaEventRecord(s.done, s.producer);
    cudaStreamWaitEvent(s.consumer, s.done, 0);
  }
  DYNCP_LAUNCH(add_one, 1, 32, 0, s.consumer)(x.get(), y.get(), n);
  cudaStreamSynchronize(s.consumer);
  cudaStreamSynchronize(s.producer);
  return y.download();
}

GPU_TEST(stream_orders_keep_event_dependencies_and_expose_missing_ones) {
  using emulation::StreamOrder;
  const RestoreOrder restore;
  Streams s;
  const std::vector<float> right(64, 6.0f), early(64, 1.0f);
  for (unsigned long long seed = 1; seed <= 12; ++seed) {
    emulation::set_stream_order(StreamOrder::random, seed);
    expect(produce_consume(s, true) == right,
           "random order, seed " + std::to_string(seed) + ": the event orders the consumer");
  }
  emulation::set_stream_order(StreamOrder::delay_one, emulation::stream_index(s.producer));
  expect(produce_consume(s, true) == right, "producer delayed: the event still orders it");
  expect(produce_consume(s, false) == early,
         "producer delayed, event removed: the consumer reads x before it is written");
  int early_seeds = 0;
  for (unsigned long long seed = 1; seed <= 12; ++seed) {
    emulation::set_stream_order(StreamOrder::random, seed);
    early_seeds += produce_consume(s, false) == early ? 1 : 0;
  }
  expect(early_seeds > 0 && early_seeds < 12,
         "random order, event removed: some seeds run the consumer first, some not (" +
             std::to_string(early_seeds) + " of 12)");
  emulation::set_stream_order(StreamOrder::immediate, 0);
  expect(produce_consume(s, false) == right, "immediate order: work runs as it is enqueued");
}

// An asynchronous copy to the host lands only when its stream has run, in every order.
GPU_TEST(stream_orders_deliver_host_copies_at_synchronisation) {
  using emulation::StreamOrder;
  const RestoreOrder restore;
  Streams s;
  emulation::set_stream_order(StreamOrder::delay_one, emulation::stream_index(s.producer));
  DeviceBuffer<float> x(std::vector<float>(8, 0.0f));
  DYNCP_LAUNCH(fill_value, 1, 32, 0, s.producer)(x.get(), 3.0f, 8);
  std::vector<float> host(8, -1.0f);
  cudaMemcpyAsync(host.data(), x.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost, s.producer);
  expect(host == std::vector<float>(8, -1.0f), "before synchronising: nothing has landed");
  cudaStreamSynchronize(s.producer);
  expect(host == std::vector<float>(8, 3.0f), "after: the kernel ran, then the copy");
}

#endif

}  // namespace
}  // namespace dyncp::gpu_test
