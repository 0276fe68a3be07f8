// Element-wise kernels: dtype conversion, RoPE, SwiGLU, AdamW, sum of squares.
#include <cmath>

#include "common.cuh"
#include "ops.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;

__global__ void f32_to_bf16_kernel(const float* src, bf16* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void add_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void bf16_to_f32_kernel(const bf16* src, float* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

// One thread per (token, head, rotated pair). The inverse frequencies come from the host
// (ops::rope_frequencies rounded to fp32, the CPU op's table) by value, and the angle is an fp32
// product, so both sides take sin/cos of the same float.
__global__ void rope_kernel(const float* x, const std::int32_t* positions, float* y,
                            std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                            int half, RopeTable table, float direction) {
  const std::int64_t pairs = tokens * heads * half;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < pairs;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % half);
    const std::int64_t row = i / half;  // token * heads + head
    const std::int64_t t = row / heads;
    const float angle = static_cast<float>(positions[t]) * table.inv_freq[j];
    const float c = table.attention_factor * cosf(angle),
                s = direction * table.attention_factor * sinf(angle);
    const std::int64_t base = row * head_dim;
    const float x1 = x[base + j], x2 = x[base + j + half];
    y[base + j] = x1 * c - x2 * s;
    y[base + j + half] = x2 * c + x1 * s;
  }
}

// Copies the dims past rotary_dim when y is not x.
__global__ void copy_tail_kernel(const float* x, float* y, std::int64_t rows, std::int64_t head_dim,
                                 int rotary_dim) {
  const std::int64_t tail = head_dim - rotary_dim, n = rows * tail;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t at = (i / tail) * head_dim + rotary_dim + i % tail;
    y[at] = x[at];
  }
}

__device__ inline float sigmoid(float a) {
  return 1.0f / (1.0f + expf(-a));
}

// gate / up as stored: fp32, or bf16 (bf16 activations) widened exactly on load.
__device__ inline float load_stored(const float* p, std::int64_t i) {
  return p[i];
}
__device__ inline float load_stored(const bf16* p, std::int64_t i) {
  return __bfloat162float(p[i]);
}

template <typename In>
__global__ void swiglu_forward_kernel(const In* gate, const In* up, std::int64_t ld_in, float* out,
                                      std::int64_t rows, std::int64_t inner) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * inner;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / inner, c = i % inner;
    const float a = load_stored(gate, r * ld_in + c);
    out[i] = a * sigmoid(a) * load_stored(up, r * ld_in + c);
  }
}

template <typename In>
__global__ void swiglu_backward_kernel(const float* dout, const In* gate, const In* up,
                                       std::int64_t ld_in, float* dgate, float* dup,
                                       std::int64_t ld_grad, std::int64_t rows,
                                       std::int64_t inner) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * inner;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / inner, c = i % inner;
    const float a = load_stored(gate, r * ld_in + c), b = load_stored(up, r * ld_in + c),
                g = dout[i];
    const float s = sigmoid(a);
    dgate[r * ld_grad + c] = g * b * s * (1.0f + a * (1.0f - s));
    dup[r * ld_grad + c] = g * a * s;
  }
}

// AdamW moments in fp32, or in bf16 for the precision-aware optimizer: widened to fp32 on load,
// rounded to nearest even on store.
__device__ inline float load_moment(const float* m, std::int64_t i) {
  return m[i];
}
__device__ inline float load_moment(const bf16* m, std::int64_t i) {
  return __bfloat162float(m[i]);
}
__device__ inline void store_moment(float* m, std::int64_t i, float value) {
  m[i] = value;
}
__device__ inline void store_moment(bf16* m, std::int64_t i, float value) {
  m[i] = __float2bfloat16_rn(value);
}

// The CPU op's arithmetic (ops::adamw_step) in its order, each operation rounded on its own
// (no fused multiply-adds), so the result is the CPU's bit for bit; the parameter update reads
// the moments as stored, which is what makes bf16 moments round-trip like the CPU's.
template <typename M, typename V>
__global__ void adamw_kernel(float* p, const float* g, M* m, V* v, std::int64_t n, float decay,
                             float beta1, float beta2, float grad_scale, float step_size,
                             float inv_sqrt_bias2, float eps) {
  const float one_minus_beta1 = __fsub_rn(1.0f, beta1), one_minus_beta2 = __fsub_rn(1.0f, beta2);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float grad = __fmul_rn(g[i], grad_scale);
    const float param = __fsub_rn(p[i], __fmul_rn(decay, p[i]));
    const float mi =
        __fadd_rn(__fmul_rn(beta1, load_moment(m, i)), __fmul_rn(one_minus_beta1, grad));
    const float vi = __fadd_rn(__fmul_rn(beta2, load_moment(v, i)),
                               __fmul_rn(__fmul_rn(one_minus_beta2, grad), grad));
    store_moment(m, i, mi);
    store_moment(v, i, vi);
    const float denominator =
        __fadd_rn(__fmul_rn(__fsqrt_rn(load_moment(v, i)), inv_sqrt_bias2), eps);
    p[i] = __fsub_rn(param, __fdiv_rn(__fmul_rn(step_size, load_moment(m, i)), denominator));
  }
}

__global__ void sum_of_squares_kernel(const float* x, std::int64_t n, double* result) {
  __shared__ double partial[32];
  double acc = 0.0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    acc += static_cast<double>(x[i]) * x[i];
  acc = detail::block_sum(acc, partial);
  if (threadIdx.x == 0) atomicAdd(result, acc);
}

}  // namespace

void convert_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(f32_to_bf16_kernel, grid_for(n), kBlock, 0, stream)(src, dst, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void convert_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(bf16_to_f32_kernel, grid_for(n), kBlock, 0, stream)(src, dst, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void rope_apply(const float* x, const std::int32_t* positions, float* y, std::int64_t tokens,
                std::int64_t heads, std::int64_t head_dim, int rotary_dim, const RopeTable& table,
                bool inverse, cudaStream_t stream) {
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim || rotary_dim / 2 > kRopeMaxPairs) {
    core::throw_runtime_error("kernels::rope_apply: rotary_dim " + std::to_string(rotary_dim) +
                              " must be even, <= head_dim " + std::to_string(head_dim) +
                              " and <= " + std::to_string(2 * kRopeMaxPairs));
  }
  const int half = rotary_dim / 2;
  if (tokens * heads == 0) return;
  if (x != y && rotary_dim < head_dim) {
    DYNCP_LAUNCH(copy_tail_kernel, grid_for(tokens * heads * (head_dim - rotary_dim)), kBlock, 0,
                 stream)
    (x, y, tokens * heads, head_dim, rotary_dim);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  if (half == 0) return;
  DYNCP_LAUNCH(rope_kernel, grid_for(tokens * heads * half), kBlock, 0, stream)
  (x, positions, y, tokens, heads, head_dim, half, table, inverse ? -1.0f : 1.0f);
  DYNCP_CUDA_CHECK_LAUNCH();
}

namespace {

template <typename In>
void launch_swiglu_forward(const In* gate, const In* up, std::int64_t ld_in, float* out,
                           std::int64_t rows, std::int64_t inner, cudaStream_t stream) {
  if (rows * inner == 0) return;
  auto* const kernel = &swiglu_forward_kernel<In>;  // one macro argument
  DYNCP_LAUNCH(kernel, grid_for(rows * inner), kBlock, 0, stream)
  (gate, up, ld_in, out, rows, inner);
  DYNCP_CUDA_CHECK_LAUNCH();
}

template <typename In>
void launch_swiglu_backward(const float* dout, const In* gate, const In* up, std::int64_t ld_in,
                            float* dgate, float* dup, std::int64_t ld_grad, std::int64_t rows,
                            std::int64_t inner, cudaStream_t stream) {
  if (rows * inner == 0) return;
  auto* const kernel = &swiglu_backward_kernel<In>;  // one macro argument
  DYNCP_LAUNCH(kernel, grid_for(rows * inner), kBlock, 0, stream)
  (dout, gate, up, ld_in, dgate, dup, ld_grad, rows, inner);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void swiglu_forward(const float* gate, const float* up, std::int64_t ld_in, float* out,
                    std::int64_t rows, std::int64_t inner, cudaStream_t stream) {
  launch_swiglu_forward(gate, up, ld_in, out, rows, inner, stream);
}

void swiglu_forward(const bf16* gate, const bf16* up, std::int64_t ld_in, float* out,
                    std::int64_t rows, std::int64_t inner, cudaStream_t stream) {
  launch_swiglu_forward(gate, up, ld_in, out, rows, inner, stream);
}

void swiglu_backward(const float* dout, const float* gate, const float* up, std::int64_t ld_in,
                     float* dgate, float* dup, std::int64_t ld_grad, std::int64_t rows,
                     std::int64_t inner, cudaStream_t stream) {
  launch_swiglu_backward(dout, gate, up, ld_in, dgate, dup, ld_grad, rows, inner, stream);
}

void swiglu_backward(const float* dout, const bf16* gate, const bf16* up, std::int64_t ld_in,
                     float* dgate, float* dup, std::int64_t ld_grad, std::int64_t rows,
                     std::int64_t inner, cudaStream_t stream) {
  launch_swiglu_backward(dout, gate, up, ld_in, dgate, dup, ld_grad, rows, inner, stream);
}

namespace {

template <typename M, typename V>
void launch_adamw(float* param, const float* grad, M* exp_avg, V* exp_avg_sq, std::int64_t n,
                  const AdamWKernelParams& p, cudaStream_t stream) {
  if (p.step < 1) core::throw_runtime_error("kernels::adamw_step: step must be >= 1");
  if (n == 0) return;
  const double bias1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bias2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  const float decay = p.apply_weight_decay ? static_cast<float>(p.lr * p.weight_decay) : 0.0f;
  auto* const adamw = &adamw_kernel<M, V>;  // one macro argument
  DYNCP_LAUNCH(adamw, grid_for(n), kBlock, 0, stream)
  (param, grad, exp_avg, exp_avg_sq, n, decay, static_cast<float>(p.beta1),
   static_cast<float>(p.beta2), static_cast<float>(p.grad_scale), static_cast<float>(p.lr / bias1),
   static_cast<float>(1.0 / std::sqrt(bias2)), static_cast<float>(p.eps));
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& p, cudaStream_t stream) {
  launch_adamw(param, grad, exp_avg, exp_avg_sq, n, p, stream);
}

void adamw_step(float* param, const float* grad, bf16* exp_avg, bf16* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& p, cudaStream_t stream) {
  launch_adamw(param, grad, exp_avg, exp_avg_sq, n, p, stream);
}

void adamw_step(float* param, const float* grad, bf16* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& p, cudaStream_t stream) {
  launch_adamw(param, grad, exp_avg, exp_avg_sq, n, p, stream);
}

void adamw_step(float* param, const float* grad, float* exp_avg, bf16* exp_avg_sq, std::int64_t n,
                const AdamWKernelParams& p, cudaStream_t stream) {
  launch_adamw(param, grad, exp_avg, exp_avg_sq, n, p, stream);
}

void sum_of_squares(const float* x, std::int64_t n, double* result, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = grid_for(n) < 1024 ? grid_for(n) : 1024;
  DYNCP_LAUNCH(sum_of_squares_kernel, blocks, kBlock, 0, stream)(x, n, result);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(add_kernel, grid_for(n), kBlock, 0, stream)(a, b, out, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
