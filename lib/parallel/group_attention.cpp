#include "parallel/group_attention.hpp"

#include "core/error.hpp"

namespace dyncp::parallel {

void GroupAttentionContext::count_bin(const model::LocalBinLayout& layout) {
  // The exchanges mask their gathered keys by causality only (the model rules refuse a window
  // under CP; this keeps any other caller from silently getting full attention).
  if (distributed() && layout.sliding_window > 0)
    core::throw_config_error("model.context_parallel_size",
                             "a sliding window runs without context parallelism only");
  local_rows_ = layout.positions.numel();
  // Every position 0..p of a query's sequence is among its keys, over the group.
  attention_pairs_per_layer_ = 0;
  const core::Tensor& host =
      layout.host_positions.defined() ? layout.host_positions : layout.positions;
  const std::int32_t* positions = host.data<std::int32_t>();
  for (std::int64_t i = 0; i < local_rows_; ++i) attention_pairs_per_layer_ += positions[i] + 1;
}

void GroupAttentionContext::count_layer() {
  if (counters_ == nullptr) return;
  counters_->attention_pairs += attention_pairs_per_layer_;
  counters_->attention_query_rows += local_rows_;
}

}  // namespace dyncp::parallel
