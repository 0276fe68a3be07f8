#pragma once
// The SIMT executor of the emulated CUDA backend: runs a kernel's own source on the host, one
// cooperative fiber per CUDA thread, blocks one after another. A fiber runs until it reaches a
// barrier (__syncthreads, a warp shuffle, a WMMA store), so barrier semantics are the
// hardware's: a block barrier opens when every live thread of the block waits at one, a warp
// barrier when every lane of the warp does. A block whose threads can never meet (some at a
// block barrier, others at a warp barrier or exited mid-warp) is reported and aborts: on a GPU
// that is a hang or undefined behaviour.
//
// Dynamic shared memory is filled with 0xff bytes (NaN as floats) at every block start, so a
// kernel that reads shared memory it did not write gets NaNs here too. Static __shared__
// arrays are function-local statics, shared by the threads of the one block that runs.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

namespace dyncp::emulation {

struct ThreadIndex {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The thread whose fiber runs now (valid only inside a kernel).
const ThreadIndex& current_thread();
unsigned char* dynamic_shared_memory();

void sync_block();
void sync_warp();
// Lane `lane ^ offset`'s value of the same shuffle; 8 bytes at most.
std::uint64_t exchange_in_warp(std::uint64_t bits, unsigned source_lane);

template <typename T>
T shfl_xor(T value, int offset) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  const unsigned lane = current_thread().thread_idx.x % 32;
  bits = exchange_in_warp(bits, lane ^ static_cast<unsigned>(offset));
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

// Runs `body` for every thread of the grid, on `stream` in the runtime's stream order
// (streams.hpp); `name` identifies the kernel in reports. Host code's access to device memory
// is opened while it runs (device_heap.hpp). The launch is checked when it is enqueued.
cudaError_t run_grid(const void* kernel, const char* name, dim3 grid, dim3 block,
                     std::size_t dynamic_shared_bytes, cudaStream_t stream,
                     std::function<void()> body);

// Aborts, naming the kernel and argument, when a pointer argument is not device memory: on a
// GPU a host pointer handed to a kernel faults.
void check_kernel_pointer(const char* name, int argument, const void* pointer);

template <typename T>
void check_argument(const char* name, int argument, const T& value) {
  if constexpr (std::is_pointer_v<T>) check_kernel_pointer(name, argument, value);
}

// `kernel<<<grid, block, smem, stream>>>(args...)`, written DYNCP_LAUNCH(kernel, grid, block,
// smem, stream)(args...) so the same source compiles under nvcc and here.
template <typename... Params>
class Launch {
 public:
  Launch(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block, std::size_t smem,
         cudaStream_t stream)
      : kernel_(kernel), name_(name), grid_(grid), block_(block), smem_(smem), stream_(stream) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    // Arguments are copied at launch, as the hardware does, and kept until the kernel runs.
    std::tuple<std::decay_t<Params>...> copied(std::forward<Args>(args)...);
    check_all(copied, std::index_sequence_for<Params...>{});
    run_grid(reinterpret_cast<const void*>(kernel_), name_, grid_, block_, smem_, stream_,
             [kernel = kernel_, copied] { std::apply(kernel, copied); });
  }

 private:
  template <typename Tuple, std::size_t... I>
  void check_all(const Tuple& values, std::index_sequence<I...>) const {
    (check_argument(name_, static_cast<int>(I), std::get<I>(values)), ...);
  }

  void (*kernel_)(Params...);
  const char* name_;
  dim3 grid_, block_;
  std::size_t smem_;
  cudaStream_t stream_;
};

template <typename... Params>
Launch<Params...> make_launch(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block,
                              std::size_t smem, cudaStream_t stream) {
  return Launch<Params...>(kernel, name, grid, block, smem, stream);
}

}  // namespace dyncp::emulation

#define DYNCP_LAUNCH(kernel, grid, block, smem, stream) \
  ::dyncp::emulation::make_launch(kernel, #kernel, grid, block, smem, stream)
