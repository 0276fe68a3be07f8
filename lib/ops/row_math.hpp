#pragma once
// Row kernels for the softmax-style loops of the ops (internal to lib/ops): exp of a shifted
// row, sum and max with independent partial accumulators. Written so the compiler can vectorise
// them without -ffast-math (the ops' hot files build at -O3).
//
// fast_exp<float>: Cephes-style range reduction exp(x) = 2^n · e^r, |r| <= ln2/2, degree-6
// polynomial; relative error ~2 ulp over the float range, inputs <= −88 (and −inf) give 0.
// fast_exp<double> is std::exp (the finite-difference tests run in double).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

// Marks a function to be compiled twice, for AVX2 and for the baseline, with the choice made
// by CPU feature when the program loads (GCC target_clones; a no-op elsewhere).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DYNCP_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DYNCP_AVX2_CLONES
#endif

namespace dyncp::ops::detail {

template <typename T>
inline T fast_exp(T x) {
  return std::exp(x);
}

template <>
inline float fast_exp<float>(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  x = std::min(std::max(x, -88.0f), 88.0f);
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // 2^n by building the exponent field; n = −127 gives 0 (the −88 clamp lands there).
  const std::int32_t biased = static_cast<std::int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<std::uint32_t>(std::max(biased, 0)) << 23);
  return er * scale;
}

// row[j] = exp(row[j] − shift). The float version lives in row_math.cpp, compiled for AVX2+FMA
// next to the baseline and picked once at run time from the CPU's features.
void exp_shifted_f32(float* row, std::int64_t n, float shift);

template <typename T>
inline void exp_shifted(T* row, std::int64_t n, T shift) {
  if constexpr (sizeof(T) == sizeof(float)) {
    exp_shifted_f32(row, n, shift);
  } else {
    for (std::int64_t j = 0; j < n; ++j) row[j] = fast_exp<T>(row[j] - shift);
  }
}

template <typename T>
inline T row_sum(const T* row, std::int64_t n) {
  T partial[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) partial[u] += row[j + u];
  }
  T total = 0;
  for (; j < n; ++j) total += row[j];
  for (int u = 0; u < 8; ++u) total += partial[u];
  return total;
}

// Σ a_j b_j with eight partial sums (vectorisable; the summation order is fixed).
template <typename T>
inline T dot_product(const T* a, const T* b, std::int64_t n) {
  T partial[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) partial[u] += a[j + u] * b[j + u];
  }
  T total = 0;
  for (; j < n; ++j) total += a[j] * b[j];
  for (int u = 0; u < 8; ++u) total += partial[u];
  return total;
}

template <typename T>
inline T row_max(const T* row, std::int64_t n, T initial) {
  T partial[8] = {initial, initial, initial, initial, initial, initial, initial, initial};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) partial[u] = row[j + u] > partial[u] ? row[j + u] : partial[u];
  }
  T result = initial;
  for (; j < n; ++j) result = row[j] > result ? row[j] : result;
  for (int u = 0; u < 8; ++u) result = partial[u] > result ? partial[u] : result;
  return result;
}

}  // namespace dyncp::ops::detail
