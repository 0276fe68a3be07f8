#pragma once
// Cross-entropy over a vocabulary-parallel LM head (tensor parallelism): each TP rank holds the
// logits of its vocabulary shard only, and the loss is reduced over the TP group without ever
// gathering the logits. Per token t, with this rank's shard of columns [first, first + count):
//   M_t = max over TP of the local max logit          (all-reduce max, one float per token)
//   S_t = sum over TP of sum_local exp(l - M_t)       (all-reduce sum, one float per token)
//   L_t = the target's logit, from the rank whose shard holds it (all-reduce sum, zeros elsewhere)
//   loss_t = log S_t + M_t - L_t;  dloss_t / dl = exp(l - M_t) / S_t - [column is the target]
// so every TP rank gets the same per-token loss and the gradient of its own columns. Megatron's
// vocab-parallel cross-entropy computes the same three reductions.
// Building block of the TP model (docs/dist.md, "Tensor parallelism in the layout"); the model
// does not call it yet.

#include <cstdint>
#include <span>
#include <vector>

#include "dist/comm.hpp"

namespace dyncp::parallel {

struct VocabShard {
  std::int64_t first = 0;  // first vocabulary id of this rank's columns
  std::int64_t count = 0;  // columns held here
  std::int64_t vocab_size = 0;
};

// The shard of TP rank `tp_index` of `tp`; config error naming model.vocab_size when tp does not
// divide it.
VocabShard vocab_shard_of(std::int64_t vocab_size, int tp, int tp_index);

// logits: [tokens, shard.count] row-major; targets: global vocabulary ids, -1 for a token without
// a label (loss 0, gradient 0). Fills grad_logits ([tokens, shard.count]) with dloss_t / dl and
// returns the per-token losses, identical on every rank of `tensor_parallel`. Collective over it:
// three all-reduces of `tokens` floats. Data error for a target outside the vocabulary.
std::vector<float> vocab_parallel_cross_entropy(dist::Comm& tensor_parallel,
                                                std::span<const float> logits,
                                                std::span<const std::int64_t> targets,
                                                const VocabShard& shard,
                                                std::span<float> grad_logits);

}  // namespace dyncp::parallel
