#pragma once
// ops::fused_cross_entropy on the GPU: LM head + log-softmax + NLL, forward and backward,
// in chunks of `token_chunk` rows so [tokens x vocab] is never materialised. Each chunk:
// logits = hidden · W^T (cuBLASLt, fp32 out), one block per row for the log-sum-exp, loss and
// dlogits = grad_scale · (softmax − onehot) in bf16 (zero on rows without loss), then
// dhidden = dlogits · W and dW += dlogits^T · hidden (cuBLASLt, fp32). Unlike the CPU op the
// chunks hold every row, counted or not (simpler; the uncounted rows cost compute only), and
// the vocabulary is one tile (scratch = token_chunk x vocab floats + as many bf16).

#include <cstdint>

#include "gemm.hpp"

namespace dyncp::kernels {

struct CrossEntropyArgs {
  // bf16 operands (mixed precision), or fp32 ones when `fp32` (the fp32 training path: the
  // products and dlogits stay in fp32).
  bool fp32 = false;
  const void* hidden = nullptr;             // [T, h]
  const void* lm_weight = nullptr;          // [V, h]
  const std::int32_t* labels = nullptr;     // [T]; negative = ignored
  const std::uint8_t* loss_mask = nullptr;  // [T] or null
  std::int64_t tokens = 0, hidden_size = 0, vocab = 0;
  std::int64_t token_chunk = 64;
  float grad_scale = 1.0f;
  float* per_token_loss = nullptr;                // [T] or null (0 on rows not counted)
  float* dhidden = nullptr;                       // [T, h] overwrite, or null (forward only)
  float* dlm_weight = nullptr;                    // [V, h] accumulate, or null
  double* loss_sum = nullptr;                     // device scalar, += Σ loss
  unsigned long long* num_loss_tokens = nullptr;  // device scalar, += counted rows
  std::int32_t* bad_label =
      nullptr;  // device scalar (init INT32_MAX): smallest row with label >= V
};

// logits_scratch: token_chunk · vocab floats; dlogits_scratch: token_chunk · vocab elements of
// the operand type.
void fused_cross_entropy(Blas& blas, const CrossEntropyArgs& args, float* logits_scratch,
                         void* dlogits_scratch, cudaStream_t stream);

}  // namespace dyncp::kernels
