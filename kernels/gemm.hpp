#pragma once
// Matrix products through cuBLASLt: bf16 (mixed precision) or fp32 inputs, fp32 accumulation and
// scaling, fp32 or bf16 output. Row-major like lib/ops/gemm.hpp; the row-major product is handed to
// cuBLASLt as the column-major product of the transposes (C^T = op(B)^T · op(A)^T), so no data
// moves.

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
  // The same with fp32 operands and output (fp32 compute, no TF32: the fp32 training path).
  void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
            float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
            float beta, float* c, std::int64_t ldc, cudaStream_t stream);

 private:
  void matmul(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
              float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb,
              OutType ab_type, float beta, void* c, OutType c_type, std::int64_t ldc,
              cudaStream_t stream);

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

// fp32 overloads of the two above (y fp32).
void linear_forward(Blas& blas, const float* x, const float* w, float* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, cudaStream_t stream);
void linear_backward(Blas& blas, const float* dy, const float* x, const float* w, float* dx,
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
// fp32 overloads (y fp32).
void grouped_linear_forward(Blas& blas, const float* x, const float* w, const std::int64_t* offsets,
                            int experts, float* y, std::int64_t in, std::int64_t out,
                            cudaStream_t stream);
void grouped_linear_backward(Blas& blas, const float* dy, const float* x, const float* w,
                             const std::int64_t* offsets, int experts, float* dx,
                             bool accumulate_dx, float* dw, std::int64_t in, std::int64_t out,
                             cudaStream_t stream);

}  // namespace dyncp::kernels
