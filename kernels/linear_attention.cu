// The per-token and per-row parts of Gated DeltaNet: the causal depthwise conv + SiLU over
// packed sequences, the q/k L2 norm and the gated output RMSNorm. Each sum runs in one thread
// in the CPU op's order (lib/ops/causal_conv1d_cpu.cpp, l2norm_cpu.cpp, gated_rmsnorm_cpu.cpp;
// row dot products with the CPU's eight partial sums).
#include <cmath>

#include "common.cuh"
#include "hybrid.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;
using detail::sigmoid;

// ops::detail::dot_product's order: eight partial sums, the tail, then the partials. The
// operands as stored: fp32, or bf16 (bf16 activations) widened exactly.
__device__ inline float stored(const float* p, std::int64_t i) {
  return p[i];
}
__device__ inline float stored(const bf16* p, std::int64_t i) {
  return __bfloat162float(p[i]);
}

template <typename A, typename B>
__device__ inline float dot_eight(const A* a, const B* b, std::int64_t n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) partial[u] += stored(a, j + u) * stored(b, j + u);
  }
  float total = 0;
  for (; j < n; ++j) total += stored(a, j) * stored(b, j);
  for (int u = 0; u < 8; ++u) total += partial[u];
  return total;
}

// The sequence holding token t: cu[s] <= t < cu[s + 1] (cu non-decreasing).
__device__ inline std::int64_t sequence_of(const std::int32_t* cu, std::int64_t sequences,
                                           std::int64_t t) {
  std::int64_t low = 0, high = sequences - 1;
  while (low < high) {
    const std::int64_t mid = (low + high + 1) / 2;
    if (cu[mid] <= t) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

// Pre-activation of token t, channel c, its sequence starting at `begin`.
__device__ inline float conv_pre(const float* x, const float* w, std::int64_t channels,
                                 std::int64_t kernel, std::int64_t begin, std::int64_t t,
                                 std::int64_t c) {
  float pre = 0;
  for (std::int64_t j = 0; j < kernel; ++j) {
    const std::int64_t source = t - (kernel - 1) + j;
    if (source >= begin) pre += w[c * kernel + j] * x[source * channels + c];
  }
  return pre;
}

__global__ void conv_forward_kernel(const float* x, const float* w, const std::int32_t* cu,
                                    float* y, std::int64_t sequences, std::int64_t tokens,
                                    std::int64_t channels, std::int64_t kernel) {
  const std::int64_t n = tokens * channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / channels, c = i % channels;
    const float pre = conv_pre(x, w, channels, kernel, cu[sequence_of(cu, sequences, t)], t, c);
    y[i] = pre * sigmoid(pre);
  }
}

// dpre = dy ⊙ silu'(pre), recomputing pre.
__global__ void conv_dpre_kernel(const float* dy, const float* x, const float* w,
                                 const std::int32_t* cu, float* dpre, std::int64_t sequences,
                                 std::int64_t tokens, std::int64_t channels, std::int64_t kernel) {
  const std::int64_t n = tokens * channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / channels, c = i % channels;
    const float pre = conv_pre(x, w, channels, kernel, cu[sequence_of(cu, sequences, t)], t, c);
    const float sg = sigmoid(pre);
    dpre[i] = dy[i] * sg * (1.0f + pre * (1.0f - sg));
  }
}

// dx_u = Σ over the outputs t = u .. u + K − 1 of u's sequence, in increasing t (the CPU
// op's scatter order).
__global__ void conv_dx_kernel(const float* dpre, const float* w, const std::int32_t* cu, float* dx,
                               std::int64_t sequences, std::int64_t tokens, std::int64_t channels,
                               std::int64_t kernel) {
  const std::int64_t n = tokens * channels;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t u = i / channels, c = i % channels;
    const std::int64_t end = cu[sequence_of(cu, sequences, u) + 1];
    float sum = 0;
    for (std::int64_t t = u; t < end && t <= u + kernel - 1; ++t)
      sum += dpre[t * channels + c] * w[c * kernel + (u + kernel - 1 - t)];
    dx[i] = sum;
  }
}

// dw[c, j] += Σ_t dpre_t[c] x_{t−(K−1)+j}[c], one thread per weight, tokens in order.
__global__ void conv_dweight_kernel(const float* dpre, const float* x, const std::int32_t* cu,
                                    float* dw, std::int64_t sequences, std::int64_t channels,
                                    std::int64_t kernel) {
  const std::int64_t n = channels * kernel;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t c = i / kernel, j = i % kernel;
    float sum = dw[i];
    for (std::int64_t s = 0; s < sequences; ++s) {
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const std::int64_t source = t - (kernel - 1) + j;
        if (source >= cu[s]) sum += dpre[t * channels + c] * x[source * channels + c];
      }
    }
    dw[i] = sum;
  }
}

__global__ void l2norm_forward_kernel(const float* x, float eps, float* y, float* inv,
                                      std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const float* xr = x + r * n;
    const float rho = 1.0f / sqrtf(dot_eight(xr, xr, n) + eps);
    inv[r] = rho;
    for (std::int64_t j = 0; j < n; ++j) y[r * n + j] = xr[j] * rho;
  }
}

__global__ void l2norm_backward_kernel(const float* dy, const float* y, const float* inv, float* dx,
                                       std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const float* yr = y + r * n;
    const float* dyr = dy + r * n;
    const float proj = dot_eight(yr, dyr, n);
    const float rho = inv[r];
    for (std::int64_t j = 0; j < n; ++j) dx[r * n + j] = rho * (dyr[j] - yr[j] * proj);
  }
}

// x (the rule output) and z as stored: fp32, or bf16 under bf16 activations.
template <typename In>
__global__ void gated_rmsnorm_forward_kernel(const In* x, const In* z, const float* w, float eps,
                                             float* y, float* inv, std::int64_t rows,
                                             std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const In* xr = x + r * n;
    const In* zr = z + r * n;
    float* yr = y + r * n;
    const float rr = 1.0f / sqrtf(dot_eight(xr, xr, n) / static_cast<float>(n) + eps);
    inv[r] = rr;
    for (std::int64_t j = 0; j < n; ++j) {
      const float zj = stored(zr, j);
      yr[j] = w[j] * (stored(xr, j) * rr) * (zj * sigmoid(zj));
    }
  }
}

// dweight, one thread per column summing the rows in order; runs before the row kernel, which
// may overwrite dy.
template <typename In>
__global__ void gated_rmsnorm_dweight_kernel(const float* dy, const In* x, const In* z,
                                             const float* inv, float* dw, std::int64_t rows,
                                             std::int64_t n) {
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < n;
       j += std::int64_t(gridDim.x) * blockDim.x) {
    float sum = dw[j];
    for (std::int64_t r = 0; r < rows; ++r) {
      const float zj = stored(z, r * n + j);
      const float silu = zj * sigmoid(zj);
      sum += dy[r * n + j] * stored(x, r * n + j) * inv[r] * silu;
    }
    dw[j] = sum;
  }
}

template <typename In>
__global__ void gated_rmsnorm_backward_kernel(const float* dy, const In* x, const In* z,
                                              const float* w, const float* inv, float* dx,
                                              float* dz, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::int64_t(gridDim.x) * blockDim.x) {
    const In* xr = x + r * n;
    const In* zr = z + r * n;
    const float* dyr = dy + r * n;
    const float rr = inv[r];
    float dot = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const float zj = stored(zr, j);
      const float silu = zj * sigmoid(zj);
      dot += stored(xr, j) * rr * dyr[j] * w[j] * silu;
    }
    const float coeff = dot / static_cast<float>(n);
    for (std::int64_t j = 0; j < n; ++j) {
      const float zj = stored(zr, j);
      const float s = sigmoid(zj);
      const float silu = zj * s;
      const float xhat = stored(xr, j) * rr;
      const float dyw = dyr[j] * w[j];
      if (dz != nullptr) dz[r * n + j] = dyw * xhat * s * (1.0f + zj * (1.0f - s));
      if (dx != nullptr) dx[r * n + j] = rr * (dyw * silu - xhat * coeff);
    }
  }
}

constexpr int kRowBlock = 64;  // thread-per-row kernels

}  // namespace

void causal_conv1d_silu_forward(const float* x, const float* weight, const std::int32_t* cu_seqlens,
                                float* y, std::int64_t sequences, std::int64_t tokens,
                                std::int64_t channels, std::int64_t kernel, cudaStream_t stream) {
  if (tokens * channels == 0 || sequences == 0) return;
  DYNCP_LAUNCH(conv_forward_kernel, grid_for(tokens * channels), kBlock, 0, stream)
  (x, weight, cu_seqlens, y, sequences, tokens, channels, kernel);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void causal_conv1d_silu_backward(const float* dy, const float* x, const float* weight,
                                 const std::int32_t* cu_seqlens, float* dx, float* dweight,
                                 float* dpre, std::int64_t sequences, std::int64_t tokens,
                                 std::int64_t channels, std::int64_t kernel, cudaStream_t stream) {
  if (tokens * channels == 0 || sequences == 0) return;
  DYNCP_LAUNCH(conv_dpre_kernel, grid_for(tokens * channels), kBlock, 0, stream)
  (dy, x, weight, cu_seqlens, dpre, sequences, tokens, channels, kernel);
  DYNCP_CUDA_CHECK_LAUNCH();
  if (dx != nullptr) {
    DYNCP_LAUNCH(conv_dx_kernel, grid_for(tokens * channels), kBlock, 0, stream)
    (dpre, weight, cu_seqlens, dx, sequences, tokens, channels, kernel);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  if (dweight != nullptr) {
    DYNCP_LAUNCH(conv_dweight_kernel, grid_for(channels * kernel, kRowBlock), kRowBlock, 0, stream)
    (dpre, x, cu_seqlens, dweight, sequences, channels, kernel);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
}

void l2norm_forward(const float* x, float eps, float* y, float* inv_norm, std::int64_t rows,
                    std::int64_t n, cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(l2norm_forward_kernel, grid_for(rows, kRowBlock), kRowBlock, 0, stream)
  (x, eps, y, inv_norm, rows, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void l2norm_backward(const float* dy, const float* y, const float* inv_norm, float* dx,
                     std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows == 0) return;
  DYNCP_LAUNCH(l2norm_backward_kernel, grid_for(rows, kRowBlock), kRowBlock, 0, stream)
  (dy, y, inv_norm, dx, rows, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

namespace {

template <typename In>
void launch_gated_rmsnorm_forward(const In* x, const In* z, const float* weight, float eps,
                                  float* y, float* inv_rms, std::int64_t rows, std::int64_t n,
                                  cudaStream_t stream) {
  if (rows == 0) return;
  auto* const kernel = &gated_rmsnorm_forward_kernel<In>;  // one macro argument
  DYNCP_LAUNCH(kernel, grid_for(rows, kRowBlock), kRowBlock, 0, stream)
  (x, z, weight, eps, y, inv_rms, rows, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

template <typename In>
void launch_gated_rmsnorm_backward(const float* dy, const In* x, const In* z, const float* weight,
                                   const float* inv_rms, float* dx, float* dz, float* dweight,
                                   std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows == 0) return;
  if (dweight != nullptr) {
    auto* const kernel = &gated_rmsnorm_dweight_kernel<In>;  // one macro argument
    DYNCP_LAUNCH(kernel, grid_for(n, kRowBlock), kRowBlock, 0, stream)
    (dy, x, z, inv_rms, dweight, rows, n);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  if (dx != nullptr || dz != nullptr) {
    auto* const kernel = &gated_rmsnorm_backward_kernel<In>;  // one macro argument
    DYNCP_LAUNCH(kernel, grid_for(rows, kRowBlock), kRowBlock, 0, stream)
    (dy, x, z, weight, inv_rms, dx, dz, rows, n);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void gated_rmsnorm_forward(const float* x, const float* z, const float* weight, float eps, float* y,
                           float* inv_rms, std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  launch_gated_rmsnorm_forward(x, z, weight, eps, y, inv_rms, rows, n, stream);
}

void gated_rmsnorm_forward(const bf16* x, const bf16* z, const float* weight, float eps, float* y,
                           float* inv_rms, std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  launch_gated_rmsnorm_forward(x, z, weight, eps, y, inv_rms, rows, n, stream);
}

void gated_rmsnorm_backward(const float* dy, const float* x, const float* z, const float* weight,
                            const float* inv_rms, float* dx, float* dz, float* dweight,
                            std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  launch_gated_rmsnorm_backward(dy, x, z, weight, inv_rms, dx, dz, dweight, rows, n, stream);
}

void gated_rmsnorm_backward(const float* dy, const bf16* x, const bf16* z, const float* weight,
                            const float* inv_rms, float* dx, float* dz, float* dweight,
                            std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  launch_gated_rmsnorm_backward(dy, x, z, weight, inv_rms, dx, dz, dweight, rows, n, stream);
}

}  // namespace dyncp::kernels
