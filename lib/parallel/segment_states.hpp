#pragma once
// The state algebra of Gated DeltaNet context parallelism by state passing
// (cp_linear_attention_states.hpp). A segment (a run of one sequence's positions on one rank)
// maps its incoming recurrent state affinely, per value head: S_out = P S_in + F. Segments are
// numbered over the group; chains[s] lists sequence s's segments in position order, and
// [first_own, end_own) are this rank's. All sums run in double; the maths is in
// ops/segment_states.hpp, so it runs where the tensors live (host or device); the chains stay
// host metadata.
//   transitions  [segments, Hv, dk, dv + dk]: [F | P] of every segment
//   states       [own segments, Hv, dk, dv]

#include <cstdint>
#include <vector>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace dyncp::parallel {

using SegmentChains = std::vector<std::vector<std::int64_t>>;

// Incoming states of the own segments: zero for a chain's first segment, and
// S_in(next) = P S_in + F along the chain. `host` holds the walks for the op.
void compose_incoming_states(const ops::OpContext& ctx, core::Arena& host,
                             const core::Tensor& transitions, const SegmentChains& chains,
                             std::int64_t first_own, std::int64_t end_own,
                             const core::Tensor& initial_states);

// Final-state gradients of the own segments: zero for a chain's last segment, and
// dS_out(prev) = dS_in(next) = G(next) + Pᵀ(next) dS_out(next), with state_grads
// [segments, Hv, dk, dv] = G of every segment.
void compose_final_state_grads(const ops::OpContext& ctx, core::Arena& host,
                               const core::Tensor& transitions, const core::Tensor& state_grads,
                               const SegmentChains& chains, std::int64_t first_own,
                               std::int64_t end_own, const core::Tensor& final_grads);

// G = dL/dS_in of each own segment through its own outputs: Σ_t w_t dout_tᵀ per head, with
// w the query maps [T, Hv, dk], dout [T, Hv, dv] and the own segments' rows in cu_seqlens.
void own_state_grads(const ops::OpContext& ctx, const core::Tensor& query_maps,
                     const core::Tensor& dout, const core::Tensor& cu_seqlens,
                     const core::Tensor& grads);

}  // namespace dyncp::parallel
