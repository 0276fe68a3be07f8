// cuBLASLt matrix products (kernels/gemm.hpp).
#include "gemm.hpp"

namespace dyncp::kernels {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

// Owns one cuBLASLt descriptor of each kind for the duration of a call.
struct MatmulDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~MatmulDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Blas::Blas() : workspace_(kWorkspaceBytes) {
  DYNCP_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void Blas::gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb,
                float beta, void* c, OutType c_type, std::int64_t ldc, cudaStream_t stream) {
  matmul(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, OutType::bf16, beta, c, c_type,
         ldc, stream);
}

void Blas::gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                float beta, float* c, std::int64_t ldc, cudaStream_t stream) {
  matmul(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, OutType::f32, beta, c,
         OutType::f32, ldc, stream);
}

void Blas::matmul(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, const void* a, std::int64_t lda, const void* b,
                  std::int64_t ldb, OutType ab_type, float beta, void* c, OutType c_type,
                  std::int64_t ldc, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const cudaDataType_t out_type = c_type == OutType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t in_type = ab_type == OutType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  if (k == 0) {
    // cuBLASLt rejects k = 0; the product is zero, so only beta · c remains.
    if (beta != 0.0f) {
      core::throw_runtime_error("kernels::Blas::gemm: k = 0 with beta != 0 is not supported");
    }
    const std::size_t element = c_type == OutType::f32 ? 4 : 2;
    DYNCP_CUDA_CHECK(cudaMemset2DAsync(c, ldc * element, 0, n * element, m, stream));
    return;
  }
  MatmulDescriptors d;
  DYNCP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: C^T [n, m] = op(B)^T [n, k] · op(A)^T [k, m]. The row-major B read
  // column-major is B^T, so cuBLAS's first operand is b with b's own transpose flag.
  const cublasOperation_t op_first = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  DYNCP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                    sizeof(op_first)));
  DYNCP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                    sizeof(op_second)));
  // Stored (column-major) shapes: b is [n, k] (or [k, n] when transposed), a is [k, m] (or
  // [m, k]), c is [n, m].
  DYNCP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&d.a, in_type, transpose_b ? k : n, transpose_b ? n : k, ldb));
  DYNCP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&d.b, in_type, transpose_a ? m : k, transpose_a ? k : m, lda));
  DYNCP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, out_type, n, m, ldc));
  DYNCP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
  const std::size_t workspace_bytes = workspace_.bytes();
  DYNCP_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  DYNCP_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.preference,
                                                    1, &heuristic, &found));
  if (found == 0) {
    core::throw_runtime_error(
        "kernels::Blas::gemm: cuBLASLt found no algorithm for m=" + std::to_string(m) +
        " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  DYNCP_CUBLAS_CHECK(cublasLtMatmul(handle_, d.op, &alpha, b, d.a, a, d.b, &beta, c, d.c, c, d.c,
                                    &heuristic.algo, workspace_.get(), workspace_bytes, stream));
}

void linear_forward(Blas& blas, const bf16* x, const bf16* w, void* y, OutType y_type,
                    std::int64_t rows, std::int64_t in, std::int64_t out, cudaStream_t stream) {
  blas.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, y_type, out, stream);
}

void linear_backward(Blas& blas, const bf16* dy, const bf16* x, const bf16* w, float* dx,
                     bool accumulate_dx, float* dw, std::int64_t rows, std::int64_t in,
                     std::int64_t out, cudaStream_t stream) {
  if (dx != nullptr) {
    blas.gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx,
              OutType::f32, in, stream);
  }
  if (dw != nullptr && rows > 0) {
    blas.gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, OutType::f32, in, stream);
  }
}

void linear_forward(Blas& blas, const float* x, const float* w, float* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, cudaStream_t stream) {
  blas.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out, stream);
}

void linear_backward(Blas& blas, const float* dy, const float* x, const float* w, float* dx,
                     bool accumulate_dx, float* dw, std::int64_t rows, std::int64_t in,
                     std::int64_t out, cudaStream_t stream) {
  if (dx != nullptr) {
    blas.gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx,
              in, stream);
  }
  if (dw != nullptr && rows > 0) {
    blas.gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in, stream);
  }
}

namespace {

// Both operand types: one linear_backward per non-empty group (its rows, its weight).
template <typename T>
void grouped_backward(Blas& blas, const T* dy, const T* x, const T* w, const std::int64_t* offsets,
                      int experts, float* dx, bool accumulate_dx, float* dw, std::int64_t in,
                      std::int64_t out, cudaStream_t stream) {
  for (int e = 0; e < experts; ++e) {
    const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows <= 0) continue;
    linear_backward(blas, dy + begin * out, x + begin * in, w + e * out * in,
                    dx == nullptr ? nullptr : dx + begin * in, accumulate_dx,
                    dw == nullptr ? nullptr : dw + e * out * in, rows, in, out, stream);
  }
}

}  // namespace

void grouped_linear_forward(Blas& blas, const bf16* x, const bf16* w, const std::int64_t* offsets,
                            int experts, void* y, OutType y_type, std::int64_t in, std::int64_t out,
                            cudaStream_t stream) {
  const std::size_t element = y_type == OutType::f32 ? 4 : 2;
  for (int e = 0; e < experts; ++e) {
    const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows <= 0) continue;
    linear_forward(blas, x + begin * in, w + e * out * in,
                   static_cast<unsigned char*>(y) + begin * out * element, y_type, rows, in, out,
                   stream);
  }
}

void grouped_linear_backward(Blas& blas, const bf16* dy, const bf16* x, const bf16* w,
                             const std::int64_t* offsets, int experts, float* dx,
                             bool accumulate_dx, float* dw, std::int64_t in, std::int64_t out,
                             cudaStream_t stream) {
  grouped_backward(blas, dy, x, w, offsets, experts, dx, accumulate_dx, dw, in, out, stream);
}

void grouped_linear_forward(Blas& blas, const float* x, const float* w, const std::int64_t* offsets,
                            int experts, float* y, std::int64_t in, std::int64_t out,
                            cudaStream_t stream) {
  for (int e = 0; e < experts; ++e) {
    const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows <= 0) continue;
    linear_forward(blas, x + begin * in, w + e * out * in, y + begin * out, rows, in, out, stream);
  }
}

void grouped_linear_backward(Blas& blas, const float* dy, const float* x, const float* w,
                             const std::int64_t* offsets, int experts, float* dx,
                             bool accumulate_dx, float* dw, std::int64_t in, std::int64_t out,
                             cudaStream_t stream) {
  grouped_backward(blas, dy, x, w, offsets, experts, dx, accumulate_dx, dw, in, out, stream);
}

}  // namespace dyncp::kernels
