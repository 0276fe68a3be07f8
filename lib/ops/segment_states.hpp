#pragma once
// The state algebra of Gated DeltaNet context parallelism by state passing
// (parallel/cp_linear_attention_states.hpp, parallel/segment_states.hpp) as ops, so it runs
// where the states live. A segment (a run of one sequence's positions on one rank) maps its
// incoming state affinely per value head, S_out = P S_in + F, with
//   transitions [segments, Hv, dk, dv + dk] = [F | P] of every segment.
// A walk is a list of segment indices (host i32 `walk_segments`, walk w =
// [walk_offsets[w], walk_offsets[w + 1])); the segments [first_own, end_own) are this rank's,
// and `states` [end_own − first_own, Hv, dk, dv] is indexed by segment − first_own.
// Sums run in double (on the device too); tensors are f32 or f64 on the CPU, f32 on cuda.

#include <cstdint>

#include "ops/context.hpp"

namespace dyncp::ops {

// Along each walk (a chain's segments in position order up to its last own one): the state
// starts at zero; at each own segment it is written to initial_states, and then (unless it is
// the walk's last) it becomes P S + F of that segment.
void compose_segment_prefixes(const OpContext& ctx, const Tensor& transitions,
                              const Tensor& walk_segments, const Tensor& walk_offsets,
                              std::int64_t first_own, std::int64_t end_own,
                              const Tensor& initial_states);

// Along each walk (a chain's segments in REVERSE position order down to its first own one):
// the gradient starts at zero; at each own segment it is written to final_grads, then (unless
// last) it becomes G + Pᵀ dS of that segment, state_grads [segments, Hv, dk, dv] holding G.
void compose_segment_suffixes(const OpContext& ctx, const Tensor& transitions,
                              const Tensor& state_grads, const Tensor& walk_segments,
                              const Tensor& walk_offsets, std::int64_t first_own,
                              std::int64_t end_own, const Tensor& final_grads);

// grads[s, h] = Σ_{t in segment s} w_t dout_tᵀ: query_maps [T, Hv, dk], dout [T, Hv, dv],
// cu_seqlens host i32 [S + 1] over the rows, grads [S, Hv, dk, dv] (overwritten).
void segment_state_grads(const OpContext& ctx, const Tensor& query_maps, const Tensor& dout,
                         const Tensor& cu_seqlens, const Tensor& grads);

// dst[r, dst_col + j] = src[r, src_col + j] for j < width, over the rows of the 2-D src and
// dst (same row count, same dtype: any on the CPU, f32 on cuda).
void copy_columns(const OpContext& ctx, const Tensor& src, std::int64_t src_col, const Tensor& dst,
                  std::int64_t dst_col, std::int64_t width);

// t [n, dk, width]: t[i, a, col + a] = 1 for every i and a < dk (the rest untouched).
void set_identity_columns(const OpContext& ctx, const Tensor& t, std::int64_t col);

}  // namespace dyncp::ops
