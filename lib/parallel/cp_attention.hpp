#pragma once
// Context-parallel attention on the runtime group of the current bin (`cp_comm_type:
// all_gather`): every rank of a group of c holds the zigzag shard of every sequence of the bin
// (chunks k and 2c-1-k), attends its local queries against the WHOLE sequences' keys, and
// gets back exactly its own rows' dK / dV.
//
// Per bin (begin_bin): all-gather the local positions and per-sequence row counts, and build
// the gathered key layout. Keys of sequence s are the rows of s from rank 0, then rank 1, ...
// (order inside a sequence does not matter: causality is by global position).
//   Example, c = 2, one sequence of padded length 8: rank 0 holds positions {0,1,6,7}, rank 1
//   {2,3,4,5}; the gathered keys are [0,1,6,7,2,3,4,5] with those positions, so rank 0's query
//   at position 6 sees keys 0..6 and rank 1's query at position 2 sees keys 0..2.
// Forward per layer: all-gather K and V (rank order), reorder into sequence order, attend.
// Backward per layer: all-gather K and V again (nothing of size c x local is kept between
// forward and backward), compute dQ locally and dK / dV for the gathered rows, reorder back
// into rank order and reduce-scatter, so rank k receives the sum over the group of the
// gradients of its own rows.
// The K and V all-gathers are started transfers (Comm::start_all_gather), both posted as soon
// as their inputs exist: on the GPU on the communicator's stream behind an event, with the
// compute stream ordered after each by an event (no host wait); K is reordered while V still
// travels. The backward's gathers start in prepare_backward, before the layer's MLP backward,
// and travel beside it. Three c x local buffers hold them (K's rank-order staging, V's, which
// is reused as the staging of dK / dV, and K in sequence order; V in sequence order takes K's
// freed staging), as many as one gather at a time would.
// A group of one rank is model::LocalAttentionContext. Every rank of a group must
// hold the same bin (the schedule guarantees it); a mismatch in row counts is a runtime error.

#include <optional>

#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_attention.hpp"

namespace dyncp::parallel {

class CpAttentionContext final : public GroupAttentionContext {
 public:
  explicit CpAttentionContext(SeamCounters* counters = nullptr) : GroupAttentionContext(counters) {}

  void begin_bin(const model::SeamContext& context, const model::LocalBinLayout& layout) override;
  void prepare_backward(const model::SeamContext& context, int layer, const core::Tensor& k,
                        const core::Tensor& v) override;
  void forward(const model::SeamContext& context, int layer, const core::Tensor& q,
               const core::Tensor& k, const core::Tensor& v, double scale, const core::Tensor& out,
               ops::AttentionSaved& saved) override;
  void backward(const model::SeamContext& context, int layer, const core::Tensor& dout,
                const core::Tensor& q, const core::Tensor& k, const core::Tensor& v,
                const core::Tensor& out, const ops::AttentionSaved& saved, double scale,
                const core::Tensor& dq, const core::Tensor& dk, const core::Tensor& dv) override;

 private:
  // The group's K and V in sequence order and a free rank-order buffer, from scratch.
  struct GatheredKv {
    core::Tensor rank_order, k, v;
  };
  // K and V gathers started into rank-order buffers (`k_staging`, `v_staging`), and the buffer
  // K is reordered into.
  struct KvInFlight {
    core::Tensor k_staging, v_staging, k;
    dist::Comm::Pending k_pending, v_pending;
    int layer = -1;
  };
  KvInFlight start_kv_gather(core::Arena& scratch, const core::Tensor& k, const core::Tensor& v,
                             int layer);
  // Orders the reordering after each transfer and puts K and V into sequence order.
  GatheredKv finish_kv_gather(KvInFlight& in_flight);
  // gathered (rank order) -> sequence order, and the inverse, row by row.
  void scatter_rank_order(const core::Tensor& sequence_order, const core::Tensor& rank_order);

  ops::VarlenAttentionLayout layout_;
  core::Tensor sequence_to_rank_row_;     // i32 [c * local_rows]: gathered row of each key
  std::optional<KvInFlight> prefetched_;  // prepare_backward's gathers, for that layer
};

}  // namespace dyncp::parallel
