#pragma once
// Grouped expert products with the group offsets in DEVICE memory (model.moe_grouped_gemm): one
// launch covers every expert of a projection, so the host never needs the per-expert row counts
// and the MoE layer runs without a device-to-host synchronisation. Rows [offsets[e],
// offsets[e+1]) of the row-grouped operands belong to expert e; weights are [E, out, in]
// row-major (ops::grouped_linear_forward / _backward, docs/cuda.md "Grouped expert GEMMs").
//
// Operands are fp32 in memory. With bf16 products the kernel rounds each operand to bf16 as it
// stages it into shared memory (round to nearest even, the CPU op's rounding) and multiplies on
// tensor cores (WMMA 16x16x16, fp32 accumulators); otherwise it multiplies in fp32 on the CUDA
// cores (no TF32), as the fp32 training path needs. Outputs are fp32.
//
// The offsets are trusted (they come from the permutation plan): the kernels clamp them to
// [0, rows] and treat a decreasing pair as an empty group, so a bad one cannot write out of
// bounds. Empty groups are skipped (their weight gradient is left untouched).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dyncp::kernels {

struct GroupedGemmShape {
  const std::int64_t* offsets = nullptr;  // device i64 [experts + 1]
  int experts = 0;
  std::int64_t rows = 0;  // rows of the row-grouped operands (offsets[experts] == rows)
  std::int64_t in = 0, out = 0;
  bool bf16_products = false;
};

// y [rows, out] = x [rows, in] · w[e]ᵀ per group (overwrite).
void grouped_gemm_forward(const GroupedGemmShape& shape, const float* x, const float* w, float* y,
                          cudaStream_t stream);
// dx [rows, in] (+)= dy [rows, out] · w[e] per group.
void grouped_gemm_data_grad(const GroupedGemmShape& shape, const float* dy, const float* w,
                            float* dx, bool accumulate, cudaStream_t stream);
// dw[e] [out, in] += dy_eᵀ · x_e over the rows of group e (accumulates; empty groups untouched).
void grouped_gemm_weight_grad(const GroupedGemmShape& shape, const float* dy, const float* x,
                              float* dw, cudaStream_t stream);
// The forward and weight gradient with x in bf16 storage (bf16 activations: the experts' kept
// rows), bf16 products only: the staged operand is the stored value, so the products are those
// of the fp32 x it was rounded from.
void grouped_gemm_forward(const GroupedGemmShape& shape, const __nv_bfloat16* x, const float* w,
                          float* y, cudaStream_t stream);
void grouped_gemm_weight_grad(const GroupedGemmShape& shape, const float* dy,
                              const __nv_bfloat16* x, float* dw, cudaStream_t stream);

}  // namespace dyncp::kernels
