#include "parallel/cp_exchange.hpp"

#include <string>

#include "core/error.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/cp_head_sharded_attention.hpp"
#include "parallel/cp_head_sharded_linear_attention.hpp"
#include "parallel/cp_linear_attention_states.hpp"
#include "parallel/cp_ring_attention.hpp"

namespace dyncp::parallel {

namespace {

CpExchangeSeams all_gather_seams(const CpExchangeOptions& options) {
  return {std::make_unique<CpAttentionContext>(options.counters),
          std::make_unique<CpStatePassingLinearAttentionContext>(options.counters), nullptr};
}

CpExchangeSeams ring_seams(const CpExchangeOptions& options) {
  return {std::make_unique<CpRingAttentionContext>(options.counters),
          std::make_unique<CpStatePassingLinearAttentionContext>(options.counters), nullptr};
}

CpExchangeSeams all_to_all_seams(const CpExchangeOptions& options) {
  return {std::make_unique<CpHeadShardedAttentionContext>(0, options.counters),
          std::make_unique<CpHeadShardedLinearAttentionContext>(0, options.counters), nullptr};
}

CpExchangeSeams hierarchical_seams(const CpExchangeOptions& options) {
  if (options.hierarchical_inner_size < 1) {
    core::throw_runtime_error(
        "CP exchange a2a+p2p needs model.hierarchical_context_parallel_sizes (validation should "
        "have refused it)");
  }
  const int inner = options.hierarchical_inner_size;
  // Shared with the other seams of the run (a pipeline stage's microbatches): split once.
  auto subgroups = options.subgroups ? options.subgroups : std::make_shared<HierarchicalGroups>();
  return {std::make_unique<CpHeadShardedAttentionContext>(inner, options.counters, subgroups),
          std::make_unique<CpHeadShardedLinearAttentionContext>(inner, options.counters, subgroups),
          subgroups};
}

struct CpExchangeEntry {
  config::CpCommType type;
  CpExchangeSeams (*make)(const CpExchangeOptions&);
  std::string_view description;
};

// The registration: one entry per exchange.
constexpr CpExchangeEntry cp_exchanges[] = {
    {config::CpCommType::all_gather, all_gather_seams,
     "K/V all-gathered over the group, dK/dV reduce-scattered"},
    {config::CpCommType::p2p, ring_seams, "K/V blocks and dK/dV accumulators passed round a ring"},
    {config::CpCommType::a2a, all_to_all_seams,
     "all-to-all to whole sequences for a slice of the heads (Ulysses)"},
    {config::CpCommType::a2a_p2p, hierarchical_seams,
     "all-to-all inside groups of the inner size, a K/V ring across them"},
};

const CpExchangeEntry* find_entry(config::CpCommType type) {
  for (const CpExchangeEntry& entry : cp_exchanges)
    if (entry.type == type) return &entry;
  return nullptr;
}

}  // namespace

CpExchangeSeams make_cp_exchange(const CpExchangeOptions& options) {
  const CpExchangeEntry* entry = find_entry(options.type);
  if (entry == nullptr) {
    core::throw_runtime_error("CP exchange: model.cp_comm_type " +
                              std::string(config::to_string(options.type)) + " has no entry");
  }
  return entry->make(options);
}

std::string_view cp_exchange_description(config::CpCommType type) {
  const CpExchangeEntry* entry = find_entry(type);
  return entry == nullptr ? std::string_view{} : entry->description;
}

}  // namespace dyncp::parallel
