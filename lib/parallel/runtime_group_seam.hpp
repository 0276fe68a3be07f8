#pragma once
// What every seam that runs on the current bin's runtime CP group holds: the group (set before
// each bin), the single-rank implementation it is on a group of one, and where its
// communication time is reported. CP attention (both exchanges) and the DeltaNet contexts
// derive from it.

#include "dist/comm.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

template <typename Seam, typename LocalSeam>
class RuntimeGroupSeam : public Seam {
 public:
  explicit RuntimeGroupSeam(SeamCounters* counters) : counters_(counters) {}

  // The runtime group of the next bin (nullptr or a one-rank group: the local seam).
  void set_group(dist::Comm* group) { group_ = group; }

 protected:
  bool distributed() const { return group_ != nullptr && group_->size() > 1; }
  // Where CP communication time goes (the step's counters, or nowhere in particular).
  double& cp_time() { return counters_ != nullptr ? counters_->cp_comm_ms : unreported_ms_; }

  dist::Comm* group_ = nullptr;
  SeamCounters* counters_;
  LocalSeam local_;  // a one-rank group: no communication at all

 private:
  double unreported_ms_ = 0;
};

}  // namespace dyncp::parallel
