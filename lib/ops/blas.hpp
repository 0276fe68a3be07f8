#pragma once
// Row-major BLAS gemm for float and double (internal to lib/ops): cblas_sgemm / cblas_dgemm.
//   c[m, n] = alpha · op(a) · op(b) + beta · c, with leading dims in elements.

#include <cblas.h>

#include <cstdint>

namespace dyncp::ops::detail {

template <typename T>
void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
               T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
               std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS would still scale c by beta; do it explicitly to avoid relying on that.
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  const auto ta = transpose_a ? CblasTrans : CblasNoTrans;
  const auto tb = transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  }
}

}  // namespace dyncp::ops::detail
