// Flash-attention backward (kernels/attention.hpp): per block, one 32-row key tile of one kv
// head; it walks every query tile of the sequence for each query head sharing the kv head,
// recomputes P from the saved lse, and accumulates dK, dV in shared memory. Then dQ, one block
// per 32-row query tile of one head, without atomics (attention_dq_kernel.cuh).
#include <string>

#include "attention.hpp"
#include "attention_backward_kernel.cuh"
#include "attention_dq_kernel.cuh"

namespace dyncp::kernels {

using namespace attention_detail;
using namespace attention_detail::backward;

void check_attention_shape(const AttentionShape& shape, const char* op) {
  const int d = shape.head_dim;
  std::string problem;
  if (d <= 0 || d % 16 != 0 || d > kMaxHeadDim) {
    problem = "head_dim " + std::to_string(d) + " must be a multiple of 16 in [16, 256]";
  } else if (shape.q_heads <= 0 || shape.kv_heads <= 0 || shape.q_heads % shape.kv_heads != 0) {
    problem = "q_heads " + std::to_string(shape.q_heads) +
              " must be a positive multiple of kv_heads " + std::to_string(shape.kv_heads);
  } else if (shape.num_seqs < 0 || shape.num_seqs > 65535) {
    problem = "num_seqs " + std::to_string(shape.num_seqs) + " must be in [0, 65535]";
  }
  if (!problem.empty()) core::throw_runtime_error(std::string(op) + ": " + problem);
}

void attention_backward(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* dout, const float* out, const float* lse, float* dq, float* dk,
                        float* dv, bool accumulate_dkv, float* scratch_d, cudaStream_t stream) {
  check_attention_shape(shape, "kernels::attention_backward");
  const std::int64_t q_rows = shape.q_tokens * shape.q_heads;
  if (q_rows > 0) {
    DYNCP_LAUNCH(attention_delta_kernel, static_cast<unsigned>((q_rows * 32 + 255) / 256), 256, 0,
                 stream)
    (dout, out, scratch_d, q_rows, shape.head_dim);
    DYNCP_CUDA_CHECK_LAUNCH();
  }
  if (shape.num_seqs == 0 || shape.max_kv_rows == 0) return;
  const std::size_t smem = BackwardLayout(shape.head_dim).bytes;
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  const dim3 grid((shape.max_kv_rows + kBlockN - 1) / kBlockN, shape.kv_heads, shape.num_seqs);
  DYNCP_LAUNCH(attention_backward_kernel, grid, kThreads, smem, stream)
  (shape, q, k, v, dout, lse, scratch_d, dk, dv, accumulate_dkv);
  DYNCP_CUDA_CHECK_LAUNCH();
  // dQ: one block per query tile and head owns its rows (no atomics).
  if (shape.max_q_rows == 0) return;
  DYNCP_CUDA_CHECK(cudaFuncSetAttribute(
      attention_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 dq_grid((shape.max_q_rows + kBlockM - 1) / kBlockM, shape.q_heads, shape.num_seqs);
  DYNCP_LAUNCH(attention_dq_kernel, dq_grid, kThreads, smem, stream)
  (shape, q, k, v, dout, lse, scratch_d, dq);
  DYNCP_CUDA_CHECK_LAUNCH();
}

}  // namespace dyncp::kernels
