#pragma once
// What the emulated runtime counts, for tests that prove where work runs and what crosses to
// the host: kernel launches (in total and by the kernel's source name; cuBLASLt products count
// as "cublasLtMatmul") and device-to-host copies (cudaMemcpy, cudaMemcpyAsync, cudaMemcpy2D
// with a device source and a host destination). Counters only grow; tests take differences.

#include <string_view>

namespace dyncp::emulation {

struct RuntimeCounters {
  unsigned long long launches = 0;
  unsigned long long device_to_host_copies = 0;
  unsigned long long device_to_host_bytes = 0;
};

RuntimeCounters runtime_counters();
// Launches of kernels whose name starts with `prefix` (e.g. "grouped_rows_kernel").
unsigned long long launches_named(std::string_view prefix);

}  // namespace dyncp::emulation
