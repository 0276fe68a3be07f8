// Flash-attention forward (kernels/attention.hpp): per block, one 64-row query tile of one
// head against the sequence's keys, 64 at a time, with an online softmax.
#include "attention.hpp"
#include "attention_forward_kernel.cuh"

namespace dyncp::kernels {

using namespace attention_detail;
using namespace attention_detail::forward;

void attention_forward(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v,
                       float* out, float* lse, cudaStream_t stream) {
  check_attention_shape(shape, "kernels::attention_forward");
  if (shape.num_seqs == 0 || shape.max_q_rows == 0) return;
  const std::size_t smem = ForwardLayout(shape.head_dim).bytes;
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  const dim3 grid((shape.max_q_rows + kBlockM - 1) / kBlockM, shape.q_heads, shape.num_seqs);
  DYNCP_LAUNCH(attention_forward_kernel, grid, kThreads, smem, stream)(shape, q, k, v, out, lse);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
