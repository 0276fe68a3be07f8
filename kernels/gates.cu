// Element-wise kernels of the hybrid layers: the sigmoid output gates, the head-half split and
// the Gated DeltaNet decay / write-strength gates. Formulas and evaluation order follow the CPU
// ops (lib/ops/sigmoid_gate_cpu.cpp, head_halves_cpu.cpp, gated_delta_gates_cpu.cpp).
#include <cmath>

#include "common.cuh"
#include "hybrid.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;
using detail::sigmoid;

// PyTorch F.softplus (beta 1, threshold 20).
__device__ inline float softplus(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__global__ void sigmoid_gate_forward_kernel(const float* x, const float* gate, float* out,
                                            std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = x[i] * sigmoid(gate[i]);
}

__global__ void sigmoid_gate_backward_kernel(const float* dout, const float* x, const float* gate,
                                             float* dx, float* dgate, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float s = sigmoid(gate[i]);
    const float d = dout[i];
    if (dgate != nullptr) dgate[i] = d * x[i] * s * (1.0f - s);
    if (dx != nullptr) dx[i] = d * s;
  }
}

__global__ void sigmoid_row_gate_forward_kernel(const float* x, const float* gate, float* out,
                                                std::int64_t rows, std::int64_t width,
                                                bool accumulate) {
  const std::int64_t n = rows * width;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float value = sigmoid(gate[i / width]) * x[i];
    out[i] = accumulate ? out[i] + value : value;
  }
}

// One thread per row: the dot product runs in the CPU op's order.
__global__ void sigmoid_row_gate_backward_kernel(const float* dout, const float* x,
                                                 const float* gate, float* dx, float* dgate,
                                                 std::int64_t rows, std::int64_t width) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const float s = sigmoid(gate[r]);
    const float* dr = dout + r * width;
    const float* xr = x + r * width;
    float dot = 0;
    for (std::int64_t j = 0; j < width; ++j) dot += dr[j] * xr[j];
    if (dgate != nullptr) dgate[r] = dot * s * (1.0f - s);
    if (dx != nullptr) {
      for (std::int64_t j = 0; j < width; ++j) dx[r * width + j] = s * dr[j];
    }
  }
}

// split (to_halves) or merge, one thread per element of a half.
__global__ void head_halves_kernel(float* packed, float* first, float* second, std::int64_t rows,
                                   std::int64_t half, bool to_halves) {
  const std::int64_t n = rows * half;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / half, j = i % half;
    float* a = packed + 2 * r * half + j;
    if (to_halves) {
      first[i] = a[0];
      second[i] = a[half];
    } else {
      a[0] = first[i];
      a[half] = second[i];
    }
  }
}

__global__ void gated_delta_gates_forward_kernel(const float* a, const float* b, const float* A_log,
                                                 const float* dt_bias, float* g, float* beta,
                                                 std::int64_t tokens, std::int64_t heads) {
  const std::int64_t n = tokens * heads;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t h = i % heads;
    const float bv = b[i];
    g[i] = -expf(A_log[h]) * softplus(a[i] + dt_bias[h]);
    beta[i] = sigmoid(bv);
  }
}

__device__ inline float decay_input_grad(const float* dg, const float* a, const float* A_log,
                                         const float* dt_bias, std::int64_t i, std::int64_t h) {
  const float gdot = dg != nullptr ? dg[i] : 0.0f;
  const float x = a[i] + dt_bias[h];
  const float derivative = x > 20.0f ? 1.0f : sigmoid(x);
  return -gdot * expf(A_log[h]) * derivative;
}

__global__ void gated_delta_gates_input_grads_kernel(const float* dg, const float* dbeta,
                                                     const float* a, const float* b,
                                                     const float* A_log, const float* dt_bias,
                                                     float* da, float* db, std::int64_t tokens,
                                                     std::int64_t heads) {
  const std::int64_t n = tokens * heads;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t h = i % heads;
    if (da != nullptr) da[i] = decay_input_grad(dg, a, A_log, dt_bias, i, h);
    if (db != nullptr) {
      const float s = sigmoid(b[i]);
      db[i] = (dbeta != nullptr ? dbeta[i] : 0.0f) * s * (1.0f - s);
    }
  }
}

// One thread per head sums over the tokens in order (the parameters' gradients accumulate).
__global__ void gated_delta_gates_param_grads_kernel(const float* dg, const float* a,
                                                     const float* A_log, const float* dt_bias,
                                                     float* dA_log, float* ddt_bias,
                                                     std::int64_t tokens, std::int64_t heads) {
  for (std::int64_t h = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; h < heads;
       h += std::int64_t(gridDim.x) * blockDim.x) {
    float bias_sum = ddt_bias != nullptr ? ddt_bias[h] : 0.0f;
    float alog_sum = dA_log != nullptr ? dA_log[h] : 0.0f;
    const float decay_rate = expf(A_log[h]);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t i = t * heads + h;
      const float gdot = dg != nullptr ? dg[i] : 0.0f;
      bias_sum += decay_input_grad(dg, a, A_log, dt_bias, i, h);
      alog_sum += gdot * (-decay_rate * softplus(a[i] + dt_bias[h]));
    }
    if (ddt_bias != nullptr) ddt_bias[h] = bias_sum;
    if (dA_log != nullptr) dA_log[h] = alog_sum;
  }
}

}  // namespace

void sigmoid_gate_forward(const float* x, const float* gate, float* out, std::int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(sigmoid_gate_forward_kernel, grid_for(n), kBlock, 0, stream)(x, gate, out, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate_backward(const float* dout, const float* x, const float* gate, float* dx,
                           float* dgate, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(sigmoid_gate_backward_kernel, grid_for(n), kBlock, 0, stream)
  (dout, x, gate, dx, dgate, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void sigmoid_row_gate_forward(const float* x, const float* gate, float* out, std::int64_t rows,
                              std::int64_t width, bool accumulate, cudaStream_t stream) {
  if (rows * width == 0) return;
  DYNCP_LAUNCH(sigmoid_row_gate_forward_kernel, grid_for(rows * width), kBlock, 0, stream)
  (x, gate, out, rows, width, accumulate);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void sigmoid_row_gate_backward(const float* dout, const float* x, const float* gate, float* dx,
                               float* dgate, std::int64_t rows, std::int64_t width,
                               cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(sigmoid_row_gate_backward_kernel, grid_for(rows, 64), 64, 0, stream)
  (dout, x, gate, dx, dgate, rows, width);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void split_head_halves(const float* packed, float* first, float* second, std::int64_t rows,
                       std::int64_t half, cudaStream_t stream) {
  if (rows * half == 0) return;
  DYNCP_LAUNCH(head_halves_kernel, grid_for(rows * half), kBlock, 0, stream)
  (const_cast<float*>(packed), first, second, rows, half, true);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void merge_head_halves(const float* first, const float* second, float* packed, std::int64_t rows,
                       std::int64_t half, cudaStream_t stream) {
  if (rows * half == 0) return;
  DYNCP_LAUNCH(head_halves_kernel, grid_for(rows * half), kBlock, 0, stream)
  (packed, const_cast<float*>(first), const_cast<float*>(second), rows, half, false);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void gated_delta_gates_forward(const float* a, const float* b, const float* A_log,
                               const float* dt_bias, float* g, float* beta, std::int64_t tokens,
                               std::int64_t heads, cudaStream_t stream) {
  if (tokens * heads == 0) return;
  DYNCP_LAUNCH(gated_delta_gates_forward_kernel, grid_for(tokens * heads), kBlock, 0, stream)
  (a, b, A_log, dt_bias, g, beta, tokens, heads);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void gated_delta_gates_backward(const float* dg, const float* dbeta, const float* a, const float* b,
                                const float* A_log, const float* dt_bias, float* da, float* db,
                                float* dA_log, float* ddt_bias, std::int64_t tokens,
                                std::int64_t heads, cudaStream_t stream) {
  if (tokens * heads == 0) return;
  if (da != nullptr || db != nullptr) {
    DYNCP_LAUNCH(gated_delta_gates_input_grads_kernel, grid_for(tokens * heads), kBlock, 0, stream)
    (dg, dbeta, a, b, A_log, dt_bias, da, db, tokens, heads);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  if (dA_log != nullptr || ddt_bias != nullptr) {
    DYNCP_LAUNCH(gated_delta_gates_param_grads_kernel, grid_for(heads, 32), 32, 0, stream)
    (dg, a, A_log, dt_bias, dA_log, ddt_bias, tokens, heads);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dyncp::kernels
