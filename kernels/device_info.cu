#include <cuda_runtime.h>

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

}  // namespace dyncp::kernels
