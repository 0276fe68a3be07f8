#pragma once
// Matrix products through BLAS (OpenBLAS cblas_sgemm / cblas_dgemm on CPU; its thread count
// follows OPENBLAS_NUM_THREADS).
//
// With bf16 products (OpContext::precision, ops/context.hpp) every entry point here reads a, b /
// x, weight, dy rounded to bf16 and accumulates in fp32 into its fp32 outputs; those calls need
// ctx.scratch (the rounded copies on CPU, the bf16 operands on CUDA).
//
// gemm works on matrices: a tensor of any rank is read as [numel / last_dim, last_dim]
// (Tensor::as_matrix), so a [T, H, d] activation can be passed directly.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

enum class Transpose { no, yes };

// c = alpha * op(a) · op(b) + (accumulate ? c : 0)
// op(a): [m, k], op(b): [k, n], c: [m, n]. a, b, c share one float dtype.
void gemm(const OpContext& ctx, const Tensor& a, Transpose transpose_a, const Tensor& b,
          Transpose transpose_b, const Tensor& c, double alpha = 1.0, bool accumulate = false);

// PyTorch Linear without bias: y = x · wᵀ.  x: rows x in (any rank, last dim = in),
// w: [out, in], y: rows x out elements in any shape (e.g. [T, H, d] with H·d = out).
void linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& y);
// dx = dy · w   (GradMode: overwrite or accumulate — accumulate where the residual joins)
// dw += dyᵀ · x (parameter gradient: always accumulates). Pass an undefined dx to skip it.
void linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                     const Tensor& dx, const Tensor& dweight,
                     GradMode dx_mode = GradMode::overwrite);

// Grouped linear for experts. Rows of x are grouped by expert: rows
// [group_offsets[e], group_offsets[e+1]) use weight[e] (group_offsets: i64 [E+1],
// group_offsets[0] = 0, non-decreasing, group_offsets[E] = rows).
// x: [rows, in], weight: [E, out, in], y: [rows, out];  y_r = x_r · weight[e(r)]ᵀ.
// Empty groups are skipped. Where the offsets live picks the CUDA path (model.moe_grouped_gemm):
// host offsets (checked here) run one product per non-empty group; offsets in device memory
// run every group in ONE launch that reads them there (kernels/grouped_gemm.hpp), so the host
// never waits for them. On the CPU they must be host offsets.
void grouped_linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                            const Tensor& group_offsets, const Tensor& y);
// dx = dy_r · weight[e]  (overwrite, or accumulate per dx_mode; undefined dx skips it)
// dweight[e] += dy_groupᵀ · x_group  (accumulates)
void grouped_linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, const Tensor& group_offsets, const Tensor& dx,
                             const Tensor& dweight, GradMode dx_mode = GradMode::overwrite);

}  // namespace dyncp::ops
