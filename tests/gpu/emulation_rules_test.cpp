// The emulated backend's own rules, each the failure a GPU would show: host code reading device
// memory, a kernel handed a host pointer, threads that can never meet at a barrier (a hang),
// too much shared memory without opting in, a copy past an allocation, and an asynchronous
// copy read before the stream is synchronised, a cp.async tile read before its wait. The
// aborting cases run in a child process.
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test.hpp"

namespace dyncp::gpu_test {
namespace {

__global__ void write_index(int* out) {
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

// Half a warp waits at a full-warp shuffle while the other half waits at __syncthreads: the
// two barriers wait for each other (a hang on a GPU).
__global__ void diverging_barriers(float* out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  } else {
    __syncthreads();
  }
}

__global__ void needs_shared(float* out) {
  DYNCP_DYNAMIC_SHARED(float, buffer);
  buffer[threadIdx.x] = 1.0f;
  out[threadIdx.x] = buffer[threadIdx.x];
}

// Each thread copies 4 floats with cp.async in two batches and reads its shared slots before
// and after waiting: out[0..3] before any wait, [4..7] after waiting for all but the newest
// batch, [8..11] after waiting for all.
__global__ void async_copies(const float* in, float* out) {
  DYNCP_DYNAMIC_SHARED(float, tile);
  __pipeline_memcpy_async(tile, in, 8);
  __pipeline_commit();
  __pipeline_memcpy_async(tile + 2, in + 2, 8);
  __pipeline_commit();
  for (int i = 0; i < 4; ++i) out[i] = tile[i];
  __pipeline_wait_prior(1);
  for (int i = 0; i < 4; ++i) out[4 + i] = tile[i];
  __pipeline_wait_prior(0);
  for (int i = 0; i < 4; ++i) out[8 + i] = tile[i];
}

// Runs `body` in a child; true when it died of SIGABRT with `message` on stderr.
bool aborts_with(const std::function<void()>& body, const std::string& message) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return false;
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string output;
  char chunk[512];
  for (ssize_t n; (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0;) output.append(chunk, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  const bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  if (!aborted || output.find(message) == std::string::npos)
    std::printf("  child output: %s\n", output.c_str());
  return aborted && output.find(message) != std::string::npos;
}

GPU_TEST(emulation_host_read_of_device_memory_aborts) {
  DeviceBuffer<float> buffer(16);
  expect(aborts_with([&] { std::printf("%f\n", static_cast<double>(buffer.get()[3])); },
                     "host code touched device memory"),
         "reading device memory from host code aborts naming it");
  expect(aborts_with([&] { buffer.get()[0] = 1.0f; }, "host code touched device memory"),
         "writing device memory from host code aborts naming it");
}

GPU_TEST(emulation_kernel_with_host_pointer_aborts) {
  std::vector<int> host(32);
  expect(aborts_with(
             [&] {
               DYNCP_LAUNCH(write_index, 1, 32, 0, nullptr)
               (host.data());
             },
             "argument 0 is a host pointer"),
         "a kernel handed a host pointer aborts");
  DeviceBuffer<int> device(32);
  DYNCP_LAUNCH(write_index, 1, 32, 0, nullptr)(device.get());
  const std::vector<int> got = device.download();
  expect(got[31] == 31 && got[0] == 0, "the same kernel on device memory runs");
}

GPU_TEST(emulation_barrier_that_never_opens_aborts) {
  DeviceBuffer<float> out(64);
  // The hang shows when the kernel runs: at once, or in a deferred stream order (streams.hpp)
  // at the synchronisation.
  expect(aborts_with(
             [&] {
               DYNCP_LAUNCH(diverging_barriers, 1, 32, 0, nullptr)(out.get());
               cudaDeviceSynchronize();
             },
             "can never continue"),
         "a warp split between a shuffle and __syncthreads is reported as a hang");
}

GPU_TEST(emulation_shared_memory_needs_opt_in) {
  DeviceBuffer<float> out(32);
  cudaGetLastError();
  DYNCP_LAUNCH(needs_shared, 1, 32, 64 * 1024, nullptr)(out.get());
  expect(cudaGetLastError() == cudaErrorInvalidValue,
         "64 KiB of dynamic shared memory without cudaFuncSetAttribute fails to launch");
  expect(cudaFuncSetAttribute(needs_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              64 * 1024) == cudaSuccess,
         "opting in succeeds");
  DYNCP_LAUNCH(needs_shared, 1, 32, 64 * 1024, nullptr)(out.get());
  expect(cudaGetLastError() == cudaSuccess, "after opting in the launch runs");
}

GPU_TEST(emulation_copies_are_checked_and_asynchronous) {
  DeviceBuffer<float> device(8);
  std::vector<float> host(16, 0.0f);
  expect(cudaMemcpy(device.get(), host.data(), 16 * sizeof(float), cudaMemcpyHostToDevice) ==
             cudaErrorInvalidValue,
         "a copy past the end of an allocation is refused");
  cudaGetLastError();
  std::vector<float> ones(8, 1.0f);
  device.upload(ones);
  cudaStream_t stream = nullptr;
  expect(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  std::vector<float> landed(8, -1.0f);
  cudaMemcpyAsync(landed.data(), device.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost, stream);
  expect(landed[0] == -1.0f, "an asynchronous copy to the host has not landed before a sync");
  cudaStreamSynchronize(stream);
  expect(landed[0] == 1.0f && landed[7] == 1.0f, "it lands at the stream synchronisation");
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dyncp::gpu_test

namespace dyncp::gpu_test {
namespace {

GPU_TEST(emulation_async_copies_land_at_their_wait) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  DeviceBuffer<float> in(values), out(12);
  DYNCP_LAUNCH(async_copies, 1, 1, 4 * sizeof(float), nullptr)(in.get(), out.get());
  expect(cudaDeviceSynchronize() == cudaSuccess, "async_copies ran");
  const std::vector<float> got = out.download();
  // Shared memory starts NaN-filled: nothing has landed before the first wait.
  expect(std::isnan(got[0]) && std::isnan(got[3]), "cp.async data is not there before its wait");
  expect(got[4] == 1.0f && got[5] == 2.0f && std::isnan(got[6]) && std::isnan(got[7]),
         "wait_prior(1) lands every batch but the newest");
  expect(got[8] == 1.0f && got[11] == 4.0f, "wait_prior(0) lands them all");
}

}  // namespace
}  // namespace dyncp::gpu_test
