#pragma once
// The vocabulary-parallel ops' part of the CUDA backend: the embedding shard lookup and gradient
// (kernels/ops.hpp) and the LM head + cross-entropy over a vocabulary shard
// (kernels/vocab_parallel_cross_entropy.hpp). It holds the backend's cuBLASLt handle, which the
// class in cuda_ops.cpp, deriving from it, shares.

#include "gemm.hpp"
#include "ops/cuda/cuda_hybrid_ops.hpp"

namespace dyncp::ops::cuda {

class CudaVocabShardOps : public CudaHybridOps {
 public:
  void embedding_shard_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                               const VocabShardRange& shard, const Tensor& out) override;
  void embedding_shard_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                                const Tensor& dtable, const VocabShardRange& shard,
                                std::int64_t padding_idx) override;
  void vocab_shard_logsumexp(const OpContext& ctx, const Tensor& hidden,
                             const Tensor& lm_weight_shard, const VocabShardRange& shard,
                             const Tensor& labels, const Tensor& loss_mask, const Tensor& shard_lse,
                             const Tensor& target_logit,
                             const CrossEntropyOptions& options) override;
  void combine_shard_logsumexp(const OpContext& ctx, const Tensor& shard_lses,
                               const Tensor& lse) override;
  CrossEntropyResult vocab_shard_cross_entropy(
      const OpContext& ctx, const Tensor& hidden, const Tensor& lm_weight_shard,
      const VocabShardRange& shard, const Tensor& labels, const Tensor& loss_mask,
      const Tensor& lse, const Tensor& target_logit, const Tensor& per_token_loss,
      const Tensor& dhidden, const Tensor& dlm_weight, const CrossEntropyOptions& options) override;

 protected:
  kernels::Blas blas_;
};

}  // namespace dyncp::ops::cuda
