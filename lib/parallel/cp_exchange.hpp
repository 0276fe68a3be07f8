#pragma once
// The CP exchanges (`model.cp_comm_type`) as one extension point: each exchange is one entry in
// the table in cp_exchange.cpp, giving the seams a bin runs with on its runtime CP group — the
// attention context and the Gated DeltaNet (linear attention) context. The step engine asks
// for the configured exchange once, sets the runtime group on both before each bin and never
// knows which it holds.
//
//   all_gather  CpAttentionContext                 DeltaNet: chunk-boundary state passing
//   p2p         CpRingAttentionContext             DeltaNet: chunk-boundary state passing
//   a2a         CpHeadShardedAttentionContext      DeltaNet: head-sharded whole sequences
//   a2a+p2p     the same over all-to-all groups    DeltaNet: head-sharded, states passed
//               of `hierarchical_inner_size`,      over the ring
//               with a K/V ring across them
//
// Adding an exchange: a config::CpCommType value, its validation rule (lib/config/
// parallel_rules.cpp), its cost terms (packing/cost_model.hpp) and one entry here.

#include <cstdint>
#include <memory>
#include <string_view>

#include "config/enums.hpp"
#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_attention.hpp"
#include "parallel/hierarchical_groups.hpp"
#include "parallel/runtime_group_seam.hpp"

namespace dyncp::parallel {

using GroupLinearAttentionContext =
    RuntimeGroupSeam<model::LinearAttentionContext, model::LocalLinearAttentionContext>;

struct CpExchangeOptions {
  config::CpCommType type = config::CpCommType::all_gather;
  // a2a+p2p: the configured inner size (hierarchical_context_parallel_sizes[0]).
  int hierarchical_inner_size = 0;
  SeamCounters* counters = nullptr;
  // a2a+p2p: the subcommunicators of an exchange made earlier, to share (a pipeline stage
  // keeps one exchange per microbatch in flight); nullptr: split its own.
  std::shared_ptr<HierarchicalGroups> subgroups;
};

struct CpExchangeSeams {
  std::unique_ptr<GroupAttentionContext> attention;
  std::unique_ptr<GroupLinearAttentionContext> linear_attention;
  // a2a+p2p: the subgroups both seams use (nullptr for the other exchanges).
  std::shared_ptr<HierarchicalGroups> subgroups;

  // What the communicators the exchange owns (not the parallel state's) have moved.
  dist::CommCounters subgroup_counters() const {
    return subgroups ? subgroups->counters() : dist::CommCounters{};
  }

  void set_group(dist::Comm* group) {
    attention->set_group(group);
    linear_attention->set_group(group);
  }
};

// The seams of `options.type`; a runtime error for a type without an entry or an a2a+p2p
// without an inner size (validation refuses both first).
CpExchangeSeams make_cp_exchange(const CpExchangeOptions& options);

// What each entry says of itself (docs and logs).
std::string_view cp_exchange_description(config::CpCommType type);

}  // namespace dyncp::parallel
