// Flash-attention forward (kernels/attention.hpp): per block, 64 query slots (rows x the query
// heads of one kv head, GQA-packed) against the sequence's keys, 64 at a time, with an online
// softmax.
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
  const QuerySlots slots(shape.q_heads, shape.kv_heads);
  const dim3 grid((shape.max_q_rows + slots.rows_per_block - 1) / slots.rows_per_block,
                  shape.kv_heads * slots.head_chunks, shape.num_seqs);
  DYNCP_LAUNCH(attention_forward_kernel, grid, kThreads, smem, stream)(shape, q, k, v, out, lse);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
