#pragma once
// ops::vocab_shard_logsumexp / combine_shard_logsumexp / vocab_shard_cross_entropy on the GPU
// (formulas in lib/ops/vocab_parallel_cross_entropy.hpp): the LM head + cross-entropy over one
// vocabulary shard [first, first + V_local) of W_lm, in the CPU op's chunks.
//
//   list_loss_rows       one block: the counted rows (label >= 0, loss_mask != 0) in token order,
//                        their count, the first label >= V and, given lse and target, each row's
//                        loss and their sum (in a fixed order). The caller reads the status back:
//                        the one host synchronisation of a step-1 or step-3 call.
//   vocab_shard_logsumexp  per chunk of `token_chunk` counted rows: gather their hidden rows;
//                        per chunk of `vocab_chunk` shard rows: logits = h · W_chunkᵀ (cuBLASLt,
//                        fp32 out) and one block per row folding the tile into a running max and
//                        sum (online log-sum-exp) and picking the label's logit; then
//                        shard_lse = max + log(sum).
//   vocab_shard_gradients  per (token chunk, vocab chunk): the tile again, dlogits =
//                        grad_scale · (exp(logit − lse) − onehot) in the operand type (bf16 under
//                        mixed precision), dh_rows (=, then +=) dlogits · W_chunk, dW_chunk +=
//                        dlogitsᵀ · h (cuBLASLt, fp32); the dh rows scattered to dhidden.
// Rows not counted never enter a product; scratch holds one tile, not [T x V_local].

#include <cstdint>

#include "gemm.hpp"

namespace dyncp::kernels {

// Read back in one copy by the caller.
struct LossRowsStatus {
  double loss_sum = 0.0;       // Σ (lse − target) over counted rows (when lse was given)
  long long count = 0;         // counted rows
  std::int32_t bad_label = 0;  // smallest token whose label is >= vocab_size, INT32_MAX if none
};

// row_index: [tokens] i32 (the first `count` entries written); lse, target, per_token_loss: [T]
// or null (per_token_loss gets 0 on rows not counted; needs lse and target).
void list_loss_rows(const std::int32_t* labels, const std::uint8_t* loss_mask, std::int64_t tokens,
                    std::int64_t vocab_size, const float* lse, const float* target,
                    float* per_token_loss, std::int32_t* row_index, LossRowsStatus* status,
                    cudaStream_t stream);

struct VocabShardArgs {
  // bf16 operands (mixed precision), or fp32 ones when `fp32` (products and dlogits in fp32).
  bool fp32 = false;
  const void* hidden = nullptr;             // [T, h]
  const void* lm_weight = nullptr;          // [V_local, h], the shard's rows
  const std::int32_t* labels = nullptr;     // [T], whole-vocabulary ids
  const std::int32_t* row_index = nullptr;  // the counted rows (list_loss_rows)
  std::int64_t count = 0;                   // how many (read back from LossRowsStatus)
  std::int64_t tokens = 0, hidden_size = 0, shard_rows = 0, shard_first = 0;
  std::int64_t token_chunk = 64, vocab_chunk = 262144;
};

// Scratch, sized by the chunks: h_rows token_chunk · h operand elements; logits token_chunk ·
// vocab_chunk floats; dlogits as many operand elements (step 3); row_max, row_sum, row_target
// token_chunk floats (step 1); dh_rows token_chunk · h floats (step 3).
struct VocabShardScratch {
  void* h_rows = nullptr;
  float* logits = nullptr;
  void* dlogits = nullptr;
  float *row_max = nullptr, *row_sum = nullptr, *row_target = nullptr;
  float* dh_rows = nullptr;
};

// shard_lse, target_logit: [T], zero on rows not counted.
void vocab_shard_logsumexp(Blas& blas, const VocabShardArgs& args, const VocabShardScratch& scratch,
                           float* shard_lse, float* target_logit, cudaStream_t stream);

// lse[t] = log Σ_s exp(shard_lses[s, t]), s in order (one thread per token).
void combine_shard_logsumexp(const float* shard_lses, std::int64_t shards, std::int64_t tokens,
                             float* lse, cudaStream_t stream);

// dhidden [T, h] overwritten (zero on rows not counted), dlm_weight [V_local, h] accumulated.
void vocab_shard_gradients(Blas& blas, const VocabShardArgs& args, const float* lse,
                           float grad_scale, const VocabShardScratch& scratch, float* dhidden,
                           float* dlm_weight, cudaStream_t stream);

}  // namespace dyncp::kernels
