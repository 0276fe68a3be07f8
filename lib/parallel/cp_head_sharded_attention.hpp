#pragma once
// Context-parallel attention by all-to-all (Ulysses): `cp_comm_type: a2a`, and with a ring
// across all-to-all groups `a2a+p2p` (hierarchical_groups.hpp). Every rank of a group of c
// holds the zigzag shard (chunks k and 2c−1−k) of every sequence of the bin.
//
// a2a (the all-to-all group is the runtime group, a = c):
//   forward: Q, K, V all-to-all to whole sequences (position order) for this rank's heads
//   (Hq/a query heads; K/V heads split, or replicated when Hkv < a: config/head_sharding.hpp),
//   local causal attention over whole sequences, out and lse all-to-all back to the shard.
//   backward: dOut all-to-all, local attention backward with the kept head-sharded Q, K, V, out
//   and lse, dQ / dK / dV all-to-all back (a replicated K/V head's gradients summed over its
//   replicas).
// a2a+p2p (inner a = min(c, inner), ring over b = c / a): the same all-to-all inside each group
//   of a ranks leaves every rank its heads for the a·T rows of its all-to-all group; those rows
//   are one block of a K/V ring (parallel::CpRingAttentionContext) over the b ranks holding the
//   same heads in the other all-to-all groups. With b = 1 it is a2a.
//
// Per layer and rank, elements moved (T local rows, d head dim, ρ = K/V replicas):
//   forward  (a−1)/a · T·d·(2·Hq + 2·ρ·Hkv) + lse T·Hq·(a−1)/a  (+ the ring's b−1 K/V blocks)
//   backward (a−1)/a · T·d·(2·Hq + 2·ρ·Hkv)                      (+ the ring's K/V and dK/dV)
// Kept for backward per layer (the bin's activation arena): the head-sharded Q, K, V, out and
// lse, together the size of the local Q, K, V, out and lse (ρ x for K/V).
// Work: every rank computes 1/a of the heads over its all-to-all group's rows; the attention
// counters still count the local (query) rows, whose sum over the pool is the bin's rows.

#include <memory>
#include <vector>

#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/cp_ring_attention.hpp"
#include "parallel/group_attention.hpp"
#include "parallel/head_exchange.hpp"
#include "parallel/hierarchical_groups.hpp"

namespace dyncp::parallel {

class CpHeadShardedAttentionContext final : public GroupAttentionContext {
 public:
  // inner_size <= 0: a2a over the whole runtime group; > 0: a2a+p2p with that inner size.
  // `levels` may be shared with the other seams of the exchange (one split per group).
  explicit CpHeadShardedAttentionContext(int inner_size, SeamCounters* counters = nullptr,
                                         std::shared_ptr<HierarchicalGroups> levels = nullptr)
      : GroupAttentionContext(counters),
        inner_size_(inner_size),
        levels_(levels ? std::move(levels) : std::make_shared<HierarchicalGroups>()) {}

  void begin_bin(const model::SeamContext& context, const model::LocalBinLayout& layout) override;
  void forward(const model::SeamContext& context, int layer, const core::Tensor& q,
               const core::Tensor& k, const core::Tensor& v, double scale, const core::Tensor& out,
               ops::AttentionSaved& saved) override;
  void backward(const model::SeamContext& context, int layer, const core::Tensor& dout,
                const core::Tensor& q, const core::Tensor& k, const core::Tensor& v,
                const core::Tensor& out, const ops::AttentionSaved& saved, double scale,
                const core::Tensor& dq, const core::Tensor& dk, const core::Tensor& dv) override;

 private:
  // What backward needs of one layer's forward, head-sharded (activation arena).
  struct LayerState {
    core::Tensor q, k, v, out;
    ops::AttentionSaved saved;
  };
  void assign_slices(const core::Tensor& q, const core::Tensor& k);

  int inner_size_;
  std::shared_ptr<HierarchicalGroups> levels_;
  HeadExchange exchange_;
  // Attention over the merged rows: the ring over the other all-to-all groups, or (no ring) its
  // one-rank path, local attention over whole sequences.
  RingLevel<CpRingAttentionContext> ring_;
  HeadSlices query_slices_, kv_slices_;
  std::vector<LayerState> layers_;
};

}  // namespace dyncp::parallel
