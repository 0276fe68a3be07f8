#pragma once
// Matrix products through cuBLASLt: bf16 inputs, fp32 accumulation and scaling, fp32 or bf16
// output. Row-major like lib/ops/gemm.hpp; the row-major product is handed to cuBLASLt as the
// column-major product of the transposes (C^T = op(B)^T · op(A)^T), so no data moves.

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_buffer.hpp"

namespace dyncp::kernels {

using bf16 = __nv_bfloat16;

enum class OutType { f32, bf16 };

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // c = alpha · op(a) · op(b) + beta · c; op(a) [m, k], op(b) [k, n], c [m, n] (row-major,
  // leading dimensions in elements). c's element type is `c_type`.
  void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
            float alpha, const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb,
            float beta, void* c, OutType c_type, std::int64_t ldc, cudaStream_t stream);

 private:
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
};

// ops::linear_forward: y [rows, out] = x [rows, in] · w [out, in]^T.
void linear_forward(Blas& blas, const bf16* x, const bf16* w, void* y, OutType y_type,
                    std::int64_t rows, std::int64_t in, std::int64_t out, cudaStream_t stream);
// ops::linear_backward: dx (+)= dy · w (skipped when dx is null); dw += dy^T · x (fp32).
void linear_backward(Blas& blas, const bf16* dy, const bf16* x, const bf16* w, float* dx,
                     bool accumulate_dx, float* dw, std::int64_t rows, std::int64_t in,
                     std::int64_t out, cudaStream_t stream);

// ops::grouped_linear_forward / _backward for experts: rows [offsets[e], offsets[e+1]) of x use
// w[e] ([E, out, in]); `offsets` is a HOST array of E + 1 entries. One cuBLASLt call per
// non-empty group (a first, correct version; a grouped kernel is future work).
void grouped_linear_forward(Blas& blas, const bf16* x, const bf16* w, const std::int64_t* offsets,
                            int experts, void* y, OutType y_type, std::int64_t in, std::int64_t out,
                            cudaStream_t stream);
void grouped_linear_backward(Blas& blas, const bf16* dy, const bf16* x, const bf16* w,
                             const std::int64_t* offsets, int experts, float* dx,
                             bool accumulate_dx, float* dw, std::int64_t in, std::int64_t out,
                             cudaStream_t stream);

}  // namespace dyncp::kernels
