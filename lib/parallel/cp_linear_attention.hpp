#pragma once
// Context parallelism for the sequence-level part of Gated DeltaNet layers
// (model::LinearAttentionContext): the conv window and the recurrent state run along whole
// sequences, but a rank of a CP group of c holds only zigzag chunks k and 2c−1−k of each.
//
// This implementation is the exact one: every rank all-gathers the sequence-level inputs of the
// layer (q/k/v before the conv, the decay g and beta) over the runtime group, runs the local
// implementation on the whole sequences (parallel::SequenceGather), and keeps its own rows of
// the output. Backward gathers the output gradient the same way, runs the whole backward and
// keeps its own rows' input gradients. Every rank of the group computes the same whole-sequence
// conv weight gradient; only group rank 0 adds it, so the sum over the pool counts it once and
// equals the one-rank value.
// Cost: each rank does the whole group's DeltaNet recurrence (c times the work of an even
// split; the projections around it stay divided) and keeps whole-sequence activations for the
// layer (c times the local size). parallel::CpStatePassingLinearAttentionContext
// (cp_linear_attention_states.hpp) divides the work by passing chunk-boundary states; this one
// stays the step engine's because its results are bitwise the one-rank ones (docs/dist.md).
// A group of one rank is model::LocalLinearAttentionContext, without communication.

#include <memory>

#include "dist/comm.hpp"
#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/runtime_group_seam.hpp"
#include "parallel/sequence_gather.hpp"

namespace dyncp::parallel {

class CpLinearAttentionContext final
    : public RuntimeGroupSeam<model::LinearAttentionContext, model::LocalLinearAttentionContext> {
 public:
  explicit CpLinearAttentionContext(SeamCounters* counters = nullptr)
      : RuntimeGroupSeam(counters) {}

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
  struct WholeInputs {
    core::Tensor q_raw, k_raw, v_raw, g, beta;
  };
  WholeInputs gather_inputs(core::Arena& arena, const core::Tensor& q_raw,
                            const core::Tensor& k_raw, const core::Tensor& v_raw,
                            const core::Tensor& g, const core::Tensor& beta);
  core::Tensor whole_like(core::Arena& arena, const core::Tensor& local) const;

  SequenceGather gather_;
};

}  // namespace dyncp::parallel
