// The glue around cuDNN's attention calls (kernels/cudnn_attention.hpp): lse rows start at
// −inf (rows no block covers), and each call's bf16 gradients add into the fp32 ones.
#include "common.cuh"
#include "cudnn_attention.hpp"

namespace dyncp::kernels {
namespace {

using detail::grid_for;
using detail::kBlock;

__global__ void fill_kernel(float* x, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

__global__ void add_bf16_kernel(const bf16* src, float* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] += __bfloat162float(src[i]);
}

}  // namespace

void fill_f32(float* x, std::int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(fill_kernel, grid_for(n), kBlock, 0, stream)(x, n, value);
  DYNCP_CUDA_CHECK_LAUNCH();
}

void add_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  DYNCP_LAUNCH(add_bf16_kernel, grid_for(n), kBlock, 0, stream)(src, dst, n);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
