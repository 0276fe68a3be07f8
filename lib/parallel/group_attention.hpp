#pragma once
// The CP attention seam on the runtime group of the current bin, whatever the exchange
// (`model.cp_comm_type`): all_gather (cp_attention.hpp) or p2p (cp_ring_attention.hpp). The
// step engine holds one, sets the group before each bin and never knows which it holds.

#include <memory>

#include "config/enums.hpp"
#include "dist/comm.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

class GroupAttentionContext : public model::AttentionContext {
 public:
  // The runtime group of the next bin (nullptr or a one-rank group: local attention).
  virtual void set_group(dist::Comm* group) = 0;
};

// The context for `type` (all_gather or p2p). a2a variants are rejected by config validation;
// reaching here with one is a runtime error.
std::unique_ptr<GroupAttentionContext> make_cp_attention_context(config::CpCommType type,
                                                                 SeamCounters* counters);

}  // namespace dyncp::parallel
