#pragma once
// MoE aux-loss statistics of sequences split over a runtime CP group: every rank of the group
// holds a zigzag part of the same sequences, in the same order, so summing the per-sequence
// rows over the group gives each sequence's whole-sequence statistics on every rank.

#include "dist/comm.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

class GroupStatisticsReducer final : public model::SequenceStatisticsReducer {
 public:
  explicit GroupStatisticsReducer(SeamCounters* counters = nullptr) : counters_(counters) {}
  void set_group(dist::Comm* group) { group_ = group; }

  void reduce(const model::SeamContext& context, const core::Tensor& counts,
              const core::Tensor& prob_sums) override;

 private:
  dist::Comm* group_ = nullptr;
  SeamCounters* counters_;
  double unreported_ms_ = 0;
};

}  // namespace dyncp::parallel
