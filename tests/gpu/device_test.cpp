// Device selection: one GPU per rank from the local rank.
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.hpp"
#include "device_info.hpp"
#include "gpu_test.hpp"

namespace dyncp::gpu_test {
namespace {

GPU_TEST(device_per_local_rank) {
  const int count = kernels::visible_device_count();
  expect(count >= 1, "a GPU is visible");
  expect(kernels::select_device_for_local_rank(count - 1) == count - 1,
         "the last local rank gets the last device");
  int current = -1;
  cudaGetDevice(&current);
  expect(current == count - 1, "the selected device is current");
  bool refused = false;
  try {
    kernels::select_device_for_local_rank(count);
  } catch (const core::Error& error) {
    refused = std::string(error.what()).find("CUDA_VISIBLE_DEVICES") != std::string::npos;
  }
  expect(refused, "a local rank without its own GPU is refused with a hint");
  kernels::select_device_for_local_rank(0);  // the other tests run on device 0
}

}  // namespace
}  // namespace dyncp::gpu_test
