#pragma once
// The CP attention seam on the runtime group of the current bin, whatever the exchange
// (`model.cp_comm_type`, parallel/cp_exchange.hpp): all_gather (cp_attention.hpp), p2p
// (cp_ring_attention.hpp), a2a and a2a+p2p (cp_head_sharded_attention.hpp).

#include <cstdint>
#include <memory>

#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/runtime_group_seam.hpp"

namespace dyncp::parallel {

class GroupAttentionContext
    : public RuntimeGroupSeam<model::AttentionContext, model::LocalAttentionContext> {
 protected:
  using RuntimeGroupSeam::RuntimeGroupSeam;
  // Per bin: this rank's query rows and the visible (query, key) pairs they evaluate (causal,
  // inside the sliding window when the model has one).
  void count_bin(const model::LocalBinLayout& layout);
  // Per layer forward: both into the counters (the equivalence suite checks the work is
  // divided with them).
  void count_layer();

  std::int64_t local_rows_ = 0;
  std::int64_t attention_pairs_per_layer_ = 0;
};

}  // namespace dyncp::parallel
