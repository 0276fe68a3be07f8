#include <cuda_runtime.h>

#include <string>

#include "cuda_check.hpp"
#include "device_info.hpp"

namespace dyncp::kernels {

int visible_device_count() {
  // cudaGetDeviceCount leaves its output untouched on error (no driver): start from zero.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return 0;
  }
  return count;
}

int select_device_for_local_rank(int local_rank) {
  const int count = visible_device_count();
  if (local_rank < 0 || local_rank >= count) {
    core::throw_runtime_error("local rank " + std::to_string(local_rank) + " needs device " +
                              std::to_string(local_rank) + " but " + std::to_string(count) +
                              " CUDA device(s) are visible: launch at most one rank per visible "
                              "GPU on each node (check CUDA_VISIBLE_DEVICES)");
  }
  DYNCP_CUDA_CHECK(cudaSetDevice(local_rank));
  return local_rank;
}

}  // namespace dyncp::kernels
