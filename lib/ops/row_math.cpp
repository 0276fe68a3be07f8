#include "ops/row_math.hpp"

namespace dyncp::ops::detail {
namespace {

void exp_shifted_baseline(float* row, std::int64_t n, float shift) {
  for (std::int64_t j = 0; j < n; ++j) row[j] = fast_exp<float>(row[j] - shift);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same loop compiled for AVX2 + FMA (8 floats per instruction). Dispatched by feature test
// rather than target_clones("arch=...") because the latter matches CPU models, not features.
__attribute__((target("avx2,fma"))) void exp_shifted_avx2(float* row, std::int64_t n, float shift) {
  for (std::int64_t j = 0; j < n; ++j) row[j] = fast_exp<float>(row[j] - shift);
}

using ExpKernel = void (*)(float*, std::int64_t, float);

ExpKernel pick_exp_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &exp_shifted_avx2;
  return &exp_shifted_baseline;
}
#endif

}  // namespace

void exp_shifted_f32(float* row, std::int64_t n, float shift) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const ExpKernel kernel = pick_exp_kernel();
  kernel(row, n, shift);
#else
  exp_shifted_baseline(row, n, shift);
#endif
}

}  // namespace dyncp::ops::detail
