#include "parallel/group_attention.hpp"

#include <string>

#include "core/error.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/cp_ring_attention.hpp"

namespace dyncp::parallel {

void GroupAttentionContext::count_bin(const model::LocalBinLayout& layout) {
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

std::unique_ptr<GroupAttentionContext> make_cp_attention_context(config::CpCommType type,
                                                                 SeamCounters* counters) {
  switch (type) {
    case config::CpCommType::all_gather:
      return std::make_unique<CpAttentionContext>(counters);
    case config::CpCommType::p2p:
      return std::make_unique<CpRingAttentionContext>(counters);
    case config::CpCommType::a2a:
    case config::CpCommType::a2a_p2p:
      break;
  }
  core::throw_runtime_error("CP attention: model.cp_comm_type " +
                            std::string(config::to_string(type)) +
                            " is not implemented (validation should have rejected it)");
}

}  // namespace dyncp::parallel
