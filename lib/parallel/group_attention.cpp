#include "parallel/group_attention.hpp"

#include <algorithm>

namespace dyncp::parallel {

void GroupAttentionContext::count_bin(const model::LocalBinLayout& layout) {
  local_rows_ = layout.positions.numel();
  // Every position 0..p of a query's sequence is among its keys, over the group; a sliding
  // window w leaves the last min(p + 1, w) of them visible.
  attention_pairs_per_layer_ = 0;
  const core::Tensor& host =
      layout.host_positions.defined() ? layout.host_positions : layout.positions;
  const std::int32_t* positions = host.data<std::int32_t>();
  const std::int64_t window = layout.sliding_window;
  for (std::int64_t i = 0; i < local_rows_; ++i) {
    const std::int64_t causal = std::int64_t{positions[i]} + 1;
    attention_pairs_per_layer_ += window > 0 ? std::min(causal, window) : causal;
  }
}

void GroupAttentionContext::count_layer() {
  if (counters_ == nullptr) return;
  counters_->attention_pairs += attention_pairs_per_layer_;
  counters_->attention_query_rows += local_rows_;
}

}  // namespace dyncp::parallel
