#pragma once
// Emulated nvcuda::wmma (16x16x16, bf16 operands, fp32 accumulators). A fragment holds the
// whole tile; lane 0 of the warp loads, multiplies and stores it while the other lanes only
// take part in the store's warp barrier. Operand rules are checked as the hardware states
// them: 32-byte aligned tile pointers, leading dimensions a multiple of 16 bytes. The
// fragment's element placement across lanes is not modelled (kernels/ never indexes one).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation models 16x16x16 fragments only");
  float x[16][16];
};

namespace detail {
inline bool lane_zero() {
  return ::dyncp::emulation::current_thread().thread_idx.x % 32 == 0;
}
inline void check_operand(const void* p, unsigned ld, std::size_t element, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0 || (ld * element) % 16 != 0) {
    std::fprintf(stderr,
                 "CUDA emulation: wmma %s operand %p with leading dimension %u breaks WMMA's "
                 "alignment rules (32-byte pointer, 16-byte leading dimension)\n",
                 what, p, ld);
    std::abort();
  }
}
inline float to_float(float value) {
  return value;
}
inline float to_float(__nv_bfloat16 value) {
  return __bfloat162float(value);
}
}  // namespace detail

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  if (!detail::lane_zero()) return;
  detail::check_operand(p, ld, sizeof(T), "load");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] =
          detail::to_float(std::is_same_v<Layout, col_major> ? p[j * ld + i] : p[i * ld + j]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ld, layout_t layout) {
  if (!detail::lane_zero()) return;
  detail::check_operand(p, ld, sizeof(float), "accumulator load");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] = layout == mem_row_major ? p[i * ld + j] : p[j * ld + i];
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float value) {
  for (auto& row : f.x)
    for (float& v : row) v = value;
}

template <typename TA, typename LA, typename TB, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  if (!detail::lane_zero()) return;
  float r[16][16];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float sum = c.x[i][j];
      for (int k = 0; k < 16; ++k) sum += a.x[i][k] * b.x[k][j];
      r[i][j] = sum;
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) d.x[i][j] = r[i][j];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t layout) {
  if (detail::lane_zero()) {
    detail::check_operand(p, ld, sizeof(float), "store");
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j)
        (layout == mem_row_major ? p[i * ld + j] : p[j * ld + i]) = f.x[i][j];
  }
  ::dyncp::emulation::sync_warp();  // the whole warp takes part, as on the hardware
}

}  // namespace nvcuda::wmma
