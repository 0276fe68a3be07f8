// NcclComm on one rank (all one GPU can check): every operation on device buffers against
// the host values. Built only with CUDA; without a visible device it reports and passes.
#include "dist/nccl_comm.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "dist/mpi_comm.hpp"

namespace {

int failures = 0;

void expect(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* device = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(T) + 1);
  cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return device;
}

template <typename T>
std::vector<T> to_host(const T* device, std::size_t count) {
  std::vector<T> host(count);
  cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  dyncp::dist::MpiRuntime runtime(&argc, &argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device visible: NcclComm test skipped");
    return 0;
  }
  auto world = runtime.world();
  {
    auto nccl = dyncp::dist::NcclComm::create(*world, "nccl_world");
    using dyncp::core::DType;
    const std::vector<float> values = {1.5f, -2.0f, 3.25f};
    float* device = to_device(values);
    nccl->all_reduce(device, device, values.size(), DType::f32, dyncp::dist::ReduceOp::sum);
    expect(to_host(device, values.size()) == values, "all_reduce on one rank is the identity");

    float* gathered = to_device(std::vector<float>(3, 0.0f));
    const std::vector<std::size_t> counts = {3};
    nccl->all_gather_v(device, 3, gathered, counts, DType::f32);
    expect(to_host(gathered, 3) == values, "all_gather_v copies the own block");

    float* exchanged = to_device(std::vector<float>(3, 0.0f));
    nccl->all_to_all_v(device, counts, exchanged, counts, DType::f32);
    expect(to_host(exchanged, 3) == values, "all_to_all_v delivers the own block");

    float* ring = to_device(std::vector<float>(3, 0.0f));
    auto pending = nccl->start_send_recv(device, 3, 0, ring, 3, 0, DType::f32);
    nccl->wait(pending);
    expect(to_host(ring, 3) == values, "start_send_recv with itself copies (a one-rank ring)");
    cudaFree(ring);

    std::vector<std::size_t> received(1, 0);
    nccl->exchange_counts(counts, received);
    expect(received[0] == 3, "exchange_counts returns host counts");

    nccl->broadcast(device, 3, DType::f32, 0);
    nccl->barrier();
    auto child = nccl->split(0, 0, "nccl_child");
    expect(child != nullptr && child->size() == 1, "split keeps the rank");
    expect(nccl->counters().total().calls == 8, "every call is counted");
    cudaFree(device);
    cudaFree(gathered);
    cudaFree(exchanged);
  }
  std::printf("NcclComm one-rank test: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
