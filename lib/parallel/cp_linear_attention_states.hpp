#pragma once
// Context parallelism for the sequence-level part of Gated DeltaNet layers
// (model::LinearAttentionContext) that DIVIDES the work: each rank runs the conv, the L2 norms
// and the gated delta rule on its own rows only, and the group hands over what crosses a
// segment boundary. A segment is a run of consecutive positions of one sequence on one rank
// (zigzag: chunks k and 2c−1−k, merged into one run on the rank holding the two middle chunks);
// along a sequence the segments belong to ranks 0, 1, .., c−1, (c−1), .., 1, 0.
//
// - Conv window: a segment's first K−1 outputs read the K−1 raw q/k/v rows before it, which
//   live on other ranks. Every rank all-gathers the last min(K−1, length) rows of every segment
//   (the tails) once per layer; a segment shorter than K−1 rows is handled by reading through
//   several earlier tails. Each rank runs the conv over [halo | own rows] per segment and keeps
//   the own outputs. Backward runs the conv backward over the same window with a zero output
//   gradient on the halo rows; the halo rows' input gradients belong to their owners, so the
//   group all-reduces a tail-sized gradient buffer and every rank adds its own tails' part.
//   The conv weight gradient of a rank covers its own output rows only: the group's sum is the
//   whole gradient.
// - Recurrence: a segment's outgoing state is affine in its incoming one, per value head:
//   S_out = P S_in + F. One forward pass over the local segments with v extended by dk zero
//   columns and initial state [0 | I] yields [F | P] (state columns evolve independently). The
//   group all-gathers [F | P] of every segment, each rank composes them in sequence order up to
//   its segments' incoming states and runs its segments from those states (saving chunk states
//   for backward). The [F | P] pass's extra out columns are w_t = P_tᵀ (scale · q_t) (P_t: the
//   transition from the segment's start through token t), since out_t = out_t|_{S_in=0} +
//   S_inᵀ w_t; they are kept, so backward gets G = dL/dS_in of each segment's own outputs as
//   Σ_t w_t dout_tᵀ without a pass. The group all-gathers G, composes the suffixes (dS_out of
//   a segment = dS_in of the next; dS_in = G + Pᵀ dS_out) and runs the backward once with that
//   final-state gradient.
// Cost per rank and layer: its own rows through the recurrence, forward about 3x (the [F | P]
// pass carries dv + dk columns) and backward once, plus the composition (about Hv·dk²·dv
// multiply-adds per segment of the sequence up to this rank's last segment); bytes: the tails
// (forward) and their gradients (backward), [F | P] and G per segment. Saved for backward per
// layer: the own halo rows, the own segments' incoming states, the query maps w and every
// segment's [F | P].
// A group of one rank is model::LocalLinearAttentionContext, without communication.

#include <cstdint>
#include <vector>

#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/runtime_group_seam.hpp"
#include "parallel/segment_states.hpp"

namespace dyncp::parallel {

class CpStatePassingLinearAttentionContext final
    : public RuntimeGroupSeam<model::LinearAttentionContext, model::LocalLinearAttentionContext> {
 public:
  explicit CpStatePassingLinearAttentionContext(SeamCounters* counters = nullptr)
      : RuntimeGroupSeam(counters) {}

  // Rows this rank ran through the recurrence, summed over forward calls (its own rows once
  // per layer: the work is divided, not repeated).
  std::int64_t recurrence_rows() const { return recurrence_rows_; }

  void begin_bin(const model::SeamContext& context, const model::LocalBinLayout& layout) override;
  void forward(const model::SeamContext& context, int layer, const model::LinearAttentionDims& dims,
               const core::Tensor& q_raw, const core::Tensor& k_raw, const core::Tensor& v_raw,
               const core::Tensor& conv_weight, const core::Tensor& g, const core::Tensor& beta,
               const core::Tensor& out, model::LinearAttentionSaved& saved) override;
  void backward(const model::SeamContext& context, int layer,
                const model::LinearAttentionDims& dims, const core::Tensor& dout,
                const core::Tensor& q_raw, const core::Tensor& k_raw, const core::Tensor& v_raw,
                const core::Tensor& conv_weight, const core::Tensor& g, const core::Tensor& beta,
                const model::LinearAttentionSaved& saved, const core::Tensor& dq_raw,
                const core::Tensor& dk_raw, const core::Tensor& dv_raw,
                const core::Tensor& dconv_weight, const core::Tensor& dg,
                const core::Tensor& dbeta) override;

 private:
  // One run of consecutive positions of a sequence on one rank.
  struct Segment {
    int rank = 0;
    std::int64_t sequence = 0;
    std::int64_t local_begin = 0;  // first local row on its rank
    std::int64_t length = 0;
    std::int64_t first_position = 0;
  };
  // Where the conv halo rows come from, for one kernel width.
  struct HaloPlan {
    std::int64_t kernel = 0;
    std::vector<std::int64_t> tail_offset;   // per segment: first row in the gathered tails
    std::vector<std::int64_t> tail_length;   // per segment: min(K − 1, length)
    std::vector<std::size_t> tail_elements;  // per rank (all_gather_v counts, × channels later)
    std::int64_t tail_rows = 0;              // all ranks
    std::vector<std::int64_t> halo_source;   // per own halo row: row in the gathered tails
    std::vector<std::int32_t> window_cu;     // per own segment: [halo | own rows] bounds
  };
  // What backward needs of one layer's forward (tensors from the activation arena).
  struct LayerState {
    core::Tensor halo;            // [own halo rows, conv channels]: raw q | k | v
    core::Tensor initial_states;  // [own segments, Hv, dk, dv]
    core::Tensor transitions;     // [segments, Hv, dk, dv + dk]: [F | P] of every segment
    core::Tensor query_maps;      // [own rows, Hv, dk]: P_tᵀ (scale · q_t) from the [F | P] pass
  };

  const HaloPlan& halo_plan(std::int64_t kernel);

  std::int64_t recurrence_rows_ = 0;

  // The bin, from begin_bin.
  std::int64_t local_rows_ = 0;
  std::vector<Segment> segments_;         // rank-major, local order within a rank
  std::vector<std::int64_t> rank_first_;  // per rank + 1: first segment of each rank
  SegmentChains chains_;                  // per sequence: segments in position order
  core::Tensor own_cu_;                   // i32 [own segments + 1] over local rows
  HaloPlan halo_;
  std::vector<LayerState> layers_;
};

}  // namespace dyncp::parallel
