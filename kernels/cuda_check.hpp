#pragma once
// Error checks for CUDA runtime and cuBLASLt calls: a failure throws core::Error (runtime kind)
// naming the call, the file:line and the library's message, so a failed launch is never silent.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.hpp"

namespace dyncp::kernels::detail {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  core::throw_runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                            " failed: " + cudaGetErrorName(status) + ": " +
                            cudaGetErrorString(status));
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  core::throw_runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                            " failed: cuBLAS status " + std::to_string(static_cast<int>(status)));
}

}  // namespace dyncp::kernels::detail

#define DYNCP_CUDA_CHECK(call) \
  ::dyncp::kernels::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define DYNCP_CUBLAS_CHECK(call) \
  ::dyncp::kernels::detail::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations (not asynchronous faults, which the
// next synchronising call reports).
#define DYNCP_CUDA_CHECK_LAUNCH() DYNCP_CUDA_CHECK(cudaGetLastError())
