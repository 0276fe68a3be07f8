#pragma once
// State shared by the emulated runtime's parts (internal to kernels/emulation/).

#include <string>

#include "cuda_runtime_api.h"

namespace dyncp::emulation {

// Remembers `error` for cudaGetLastError and returns it; `detail` is what
// cudaGetErrorString reports for it until the next error.
cudaError_t record_error(cudaError_t error, std::string detail = {});
bool stream_is_valid(cudaStream_t stream);
// Counts kernel launches, in total and by kernel name (emulation_counters.h).
void note_launch(const char* name);
unsigned long long launch_count();

}  // namespace dyncp::emulation
