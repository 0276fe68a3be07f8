#include "cublasLt.h"

#include <cblas.h>

#include <cstring>
#include <vector>

#include "cuda_bf16.h"
#include "device_heap.hpp"
#include "runtime_state.hpp"
#include "streams.hpp"

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {};

namespace {

using dyncp::emulation::DeviceHeap;

std::size_t element_bytes(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : 2;
}

// Column-major matrix (rows x cols, leading dimension ld) to dense fp32, column-major.
std::vector<float> to_f32(const void* data, const cublasLtMatrixLayoutOpaque_t& layout) {
  std::vector<float> out(layout.rows * layout.cols);
  for (std::uint64_t j = 0; j < layout.cols; ++j) {
    for (std::uint64_t i = 0; i < layout.rows; ++i) {
      const std::size_t at = j * static_cast<std::size_t>(layout.ld) + i;
      out[j * layout.rows + i] =
          layout.type == CUDA_R_32F ? static_cast<const float*>(data)[at]
                                    : __bfloat162float(static_cast<const __nv_bfloat16*>(data)[at]);
    }
  }
  return out;
}

bool on_device(const void* data, const cublasLtMatrixLayoutOpaque_t& layout) {
  if (layout.cols == 0 || layout.rows == 0) return true;
  const std::size_t bytes =
      ((layout.cols - 1) * static_cast<std::size_t>(layout.ld) + layout.rows) *
      element_bytes(layout.type);
  return DeviceHeap::instance().covers(data, bytes);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (compute != CUBLAS_COMPUTE_32F || scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, std::size_t bytes) {
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t op;
  std::memcpy(&op, value, sizeof op);
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSA) {
    desc->transa = op;
  } else if (attribute == CUBLASLT_MATMUL_DESC_TRANSB) {
    desc->transb = op;
  } else {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  if (ld < static_cast<std::int64_t>(rows) || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  *preference = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void*, std::size_t) {
  return attribute == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? CUBLAS_STATUS_SUCCESS
                                                               : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  *returned = requested > 0 ? 1 : 0;
  if (requested > 0) results[0] = {};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*,
                              std::size_t, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!dyncp::emulation::stream_is_valid(stream)) return CUBLAS_STATUS_INVALID_VALUE;
  // D = alpha · op(A) · op(B) + beta · C, all column-major.
  const auto m = static_cast<int>(desc->transa == CUBLAS_OP_N ? a_layout->rows : a_layout->cols);
  const auto k = static_cast<int>(desc->transa == CUBLAS_OP_N ? a_layout->cols : a_layout->rows);
  const auto kb = static_cast<int>(desc->transb == CUBLAS_OP_N ? b_layout->rows : b_layout->cols);
  const auto n = static_cast<int>(desc->transb == CUBLAS_OP_N ? b_layout->cols : b_layout->rows);
  if (k != kb || c_layout->rows != static_cast<std::uint64_t>(m) ||
      c_layout->cols != static_cast<std::uint64_t>(n) || d_layout->rows != c_layout->rows ||
      d_layout->cols != c_layout->cols || a_layout->type != b_layout->type) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!on_device(a, *a_layout) || !on_device(b, *b_layout) || !on_device(c, *c_layout) ||
      !on_device(d, *d_layout)) {
    return CUBLAS_STATUS_INVALID_VALUE;  // a host pointer handed to cuBLASLt
  }
  dyncp::emulation::note_launch("cublasLtMatmul");
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cublasOperation_t transa = desc->transa, transb = desc->transb;
  const cublasLtMatrixLayoutOpaque_t la = *a_layout, lb = *b_layout, lc = *c_layout, ld = *d_layout;
  // Runs in stream order (kernels/emulation/streams.hpp), like a kernel.
  dyncp::emulation::submit(stream, [=] {
    dyncp::emulation::DeviceAccess access;
    const std::vector<float> fa = to_f32(a, la), fb = to_f32(b, lb);
    std::vector<float> fd(static_cast<std::size_t>(m) * n, 0.0f);
    if (beta_value != 0.0f) fd = to_f32(c, lc);
    if (k > 0) {
      cblas_sgemm(CblasColMajor, transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                  transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha_value,
                  fa.data(), static_cast<int>(la.rows), fb.data(), static_cast<int>(lb.rows),
                  beta_value, fd.data(), m);
    } else {
      for (float& value : fd) value *= beta_value;
    }
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        const std::size_t at = static_cast<std::size_t>(j) * ld.ld + i;
        const float value = fd[static_cast<std::size_t>(j) * m + i];
        if (ld.type == CUDA_R_32F) {
          static_cast<float*>(d)[at] = value;
        } else {
          static_cast<__nv_bfloat16*>(d)[at] = __float2bfloat16_rn(value);
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
