#include "parallel/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

VocabShard vocab_shard_of(std::int64_t vocab_size, int tp, int tp_index) {
  if (tp < 1 || vocab_size % tp != 0) {
    core::throw_config_error("model.vocab_size", std::to_string(vocab_size) +
                                                     ": must be divisible by "
                                                     "tensor_model_parallel_size " +
                                                     std::to_string(tp) +
                                                     " (the LM head is split by vocabulary rows)");
  }
  const std::int64_t count = vocab_size / tp;
  return {tp_index * count, count, vocab_size};
}

std::vector<float> vocab_parallel_cross_entropy(dist::Comm& tensor_parallel,
                                                std::span<const float> logits,
                                                std::span<const std::int64_t> targets,
                                                const VocabShard& shard,
                                                std::span<float> grad_logits) {
  const std::size_t tokens = targets.size();
  const auto width = static_cast<std::size_t>(shard.count);
  DYNCP_CHECK(logits.size() == tokens * width && grad_logits.size() == logits.size(),
              "vocab-parallel cross-entropy: logits and gradients must be [tokens, shard columns]");
  for (std::size_t t = 0; t < tokens; ++t) {
    if (targets[t] < -1 || targets[t] >= shard.vocab_size) {
      core::throw_data_error("label of token " + std::to_string(t),
                             std::to_string(targets[t]) + ": outside the vocabulary of " +
                                 std::to_string(shard.vocab_size));
    }
  }
  std::vector<float> maximum(tokens, -std::numeric_limits<float>::infinity());
  for (std::size_t t = 0; t < tokens; ++t) {
    const auto row = logits.subspan(t * width, width);
    maximum[t] = *std::max_element(row.begin(), row.end());
  }
  tensor_parallel.all_reduce(std::span<float>(maximum), dist::ReduceOp::max);

  std::vector<float> sum_exp(tokens, 0.0f);
  std::vector<float> target_logit(tokens, 0.0f);
  for (std::size_t t = 0; t < tokens; ++t) {
    const auto row = logits.subspan(t * width, width);
    double sum = 0.0;
    for (const float value : row) sum += std::exp(static_cast<double>(value - maximum[t]));
    sum_exp[t] = static_cast<float>(sum);
    const std::int64_t local = targets[t] - shard.first;
    if (targets[t] >= 0 && local >= 0 && local < shard.count) {
      target_logit[t] = row[static_cast<std::size_t>(local)];
    }
  }
  tensor_parallel.all_reduce(std::span<float>(sum_exp), dist::ReduceOp::sum);
  tensor_parallel.all_reduce(std::span<float>(target_logit), dist::ReduceOp::sum);

  std::vector<float> loss(tokens, 0.0f);
  for (std::size_t t = 0; t < tokens; ++t) {
    auto grad = grad_logits.subspan(t * width, width);
    if (targets[t] < 0) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      continue;
    }
    const auto row = logits.subspan(t * width, width);
    loss[t] = std::log(sum_exp[t]) + maximum[t] - target_logit[t];
    const float inverse = 1.0f / sum_exp[t];
    for (std::size_t v = 0; v < width; ++v) grad[v] = std::exp(row[v] - maximum[t]) * inverse;
    const std::int64_t local = targets[t] - shard.first;
    if (local >= 0 && local < shard.count) grad[static_cast<std::size_t>(local)] -= 1.0f;
  }
  return loss;
}

}  // namespace dyncp::parallel
