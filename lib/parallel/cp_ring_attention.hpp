#pragma once
// Context-parallel attention as a ring (`cp_comm_type: p2p`) on the runtime group of the
// current bin. Every rank of a group of c holds the zigzag shard of every sequence of the bin
// (chunks k and 2c-1-k, as for all_gather), and the K/V blocks travel round the group instead
// of being gathered: rank r sends to r+1 and receives from r-1, so at ring step i it holds the
// block of group rank (r - i) mod c.
//
// Per bin (begin_bin): all-gather each rank's row count, cu_seqlens and positions (integers,
// c x local rows x 4 bytes, the same for every layer, so they are exchanged once per bin and
// never travel with the K/V blocks), and note for every source rank whether any local query
// sees any of its keys (a block with none is skipped: no attention call, and in backward
// zeros for its dK / dV contribution). With a sliding window w a block is seen only where a
// key lies fewer than w positions before a query, so under zigzag most far blocks of a long
// sequence are skipped.
//
// Forward per layer, steps i = 0..c-1: start sending the held K/V block to r+1 and receiving
// the next from r-1, attend the local queries against the held block (causal by global
// position inside each sequence, and inside the window), fold the partial result into out /
// lse with the log-sum-exp merge (ops::attention_merge; a query that sees no key of a block
// has lse −inf there and keeps its accumulated row), then wait for the transfer. Step 0 is
// the local block and writes out / lse directly (every query sees at least its own key
// there, window or not); the last step sends nothing.
//
// Backward per layer, with the saved (final, merged) out and lse, so each block's dK / dV
// contribution is exact and dQ contributions simply add:
//   step 0: own block: dQ, dK, dV of the local queries against the local keys (overwrite);
//   step i >= 1: K/V ring as in forward; the contribution to the held block's dK / dV goes
//     into a fresh accumulator, the accumulator for that block arriving from r-1 (the sum of
//     the ranks that held the block before) is added, and the sum is sent on to r+1 while the
//     next step computes. After step c-1 the accumulator that arrives is the sum of the other
//     c-1 ranks' contributions to this rank's own block: added to dK / dV.
// Each block's accumulator starts at the rank after its owner and ends at the owner, so the
// ring moves the same bytes as all_gather + reduce-scatter: per layer (c-1) K/V blocks in
// forward, (c-1) K/V blocks plus (c-1) dK/dV blocks in backward.
//
// Memory (scratch, released after each layer; B = local rows x kv heads x head_dim elements):
//   forward  4 B (the held and the incoming K and V) + one partial out and lse;
//   backward 4 B (K/V in flight) + 6 B (dK/dV: being computed, being sent, being received);
// independent of c, where all_gather needs 3 c B forward and 5 c B backward. Nothing of
// size c x local K/V is ever kept.
//
// A group of one rank is model::LocalAttentionContext. Every rank of a group must hold the
// same bin (the schedule guarantees it); a mismatch in row counts is a runtime error.

#include <vector>

#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_attention.hpp"

namespace dyncp::parallel {

class CpRingAttentionContext final : public GroupAttentionContext {
 public:
  explicit CpRingAttentionContext(SeamCounters* counters = nullptr)
      : GroupAttentionContext(counters) {}

  void begin_bin(const model::SeamContext& context, const model::LocalBinLayout& layout) override;
  void forward(const model::SeamContext& context, int layer, const core::Tensor& q,
               const core::Tensor& k, const core::Tensor& v, double scale, const core::Tensor& out,
               ops::AttentionSaved& saved) override;
  void backward(const model::SeamContext& context, int layer, const core::Tensor& dout,
                const core::Tensor& q, const core::Tensor& k, const core::Tensor& v,
                const core::Tensor& out, const ops::AttentionSaved& saved, double scale,
                const core::Tensor& dq, const core::Tensor& dk, const core::Tensor& dv) override;

 private:
  // Group rank whose block this rank holds at ring step `step`.
  int source_at(int step) const;
  // Starts passing `k` and `v` to the next rank and receiving the previous rank's into
  // `next_k` / `next_v` (one exchange each, K first on every rank).
  void start_pass(const core::Tensor& k, const core::Tensor& v, const core::Tensor& next_k,
                  const core::Tensor& next_v, int tag, dist::Comm::PendingSendRecv pending[2]);
  void wait_pass(dist::Comm::PendingSendRecv pending[2]);

  // Per source group rank: the local queries against that rank's block (views into the
  // gathered integers below, which live in the bin's activation arena).
  std::vector<ops::VarlenAttentionLayout> layouts_;
  std::vector<char> visible_;  // per source rank: does any local query see any of its keys
};

}  // namespace dyncp::parallel
