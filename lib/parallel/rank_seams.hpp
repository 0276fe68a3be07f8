#pragma once
// The model's seams over one rank's communicators: the CP exchange on the runtime group, the
// EP dispatcher (with expert tensor parallelism when etp > 1), the TP group and the group
// statistics. The step engine holds one set; a pipeline stage one per microbatch in flight.

#include <cstdint>

#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "parallel/cp_exchange.hpp"
#include "parallel/ep_dispatcher.hpp"
#include "parallel/group_statistics.hpp"
#include "parallel/tensor_parallel_group.hpp"

namespace dyncp::parallel {

struct RankSeams {
  // Every seam counts into `exchange.counters`.
  RankSeams(dist::ParallelState& parallel_state, const config::ModelArchitecture& architecture,
            const CpExchangeOptions& exchange);

  // The runtime CP group of the next microbatch (nullptr: one rank).
  void set_group(dist::Comm* group) {
    exchange.set_group(group);
    statistics.set_group(group);
  }

  model::BinSeams seams() {
    return {exchange.attention.get(), &experts, &statistics, exchange.linear_attention.get(),
            &tensor_parallel};
  }

  CpExchangeSeams exchange;  // attention and Gated DeltaNet (hybrid) seams
  EpExpertDispatcher experts;
  TensorParallelGroup tensor_parallel;
  GroupStatisticsReducer statistics;
};

}  // namespace dyncp::parallel
