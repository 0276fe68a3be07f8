#pragma once
// Single-rank implementations of the seams (seams.hpp), and the expert computation every
// ExpertDispatcher runs on the rows it ends up holding.

#include "model/seams.hpp"

namespace dyncp::model {

// SwiGLU experts on rows grouped by expert: for group e (rows [offsets[e], offsets[e+1])),
//   gate_up = x · gate_upᵀ[e]  [R, 2I],  hidden = silu(gate) ⊙ up  [R, I],  y = hidden · downᵀ[e]
// saved.gate_up / saved.hidden are allocated from context.activations (hidden only a scratch
// temporary when saved.recompute_hidden; the backward then recomputes it); saved.rows and
// saved.group_offsets alias the inputs.
void run_experts_forward(const SeamContext& context, const Tensor& rows,
                         const Tensor& group_offsets, const ExpertWeights& weights, const Tensor& y,
                         ExpertSaved& saved);
// drows [R, h]: overwrite. Weight gradients accumulate. Temporaries from context.scratch.
void run_experts_backward(const SeamContext& context, const Tensor& dy,
                          const ExpertWeights& weights, const ExpertSaved& saved,
                          const Tensor& drows);

// Attention over the local rows only (all of every sequence is on this rank).
class LocalAttentionContext final : public AttentionContext {
 public:
  void begin_bin(const SeamContext& context, const LocalBinLayout& layout) override;
  void forward(const SeamContext& context, int layer, const Tensor& q, const Tensor& k,
               const Tensor& v, double scale, const Tensor& out,
               ops::AttentionSaved& saved) override;
  void backward(const SeamContext& context, int layer, const Tensor& dout, const Tensor& q,
                const Tensor& k, const Tensor& v, const Tensor& out,
                const ops::AttentionSaved& saved, double scale, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) override;

 private:
  ops::VarlenAttentionLayout layout_;
};

// All experts are local: no exchange.
class LocalExpertDispatcher final : public ExpertDispatcher {
 public:
  void forward(const SeamContext& context, int layer, const Tensor& x_perm,
               const Tensor& expert_offsets, const ExpertWeights& weights, const Tensor& y_perm,
               ExpertSaved& saved) override;
  void backward(const SeamContext& context, int layer, const Tensor& dy_perm,
                const Tensor& expert_offsets, const ExpertWeights& weights,
                const ExpertSaved& saved, const Tensor& dx_perm) override;
};

// Every sequence is whole on this rank: nothing to sum.
class LocalSequenceStatisticsReducer final : public SequenceStatisticsReducer {
 public:
  void reduce(const SeamContext&, const Tensor&, const Tensor&) override {}
};

// Gated DeltaNet over whole sequences held on this rank: conv + SiLU, L2 norm and the chunked
// gated delta rule (chunk states kept for backward), per sequence from a zero state.
class LocalLinearAttentionContext final : public LinearAttentionContext {
 public:
  void begin_bin(const SeamContext& context, const LocalBinLayout& layout) override;
  void forward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
               const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
               const Tensor& conv_weight, const Tensor& g, const Tensor& beta, const Tensor& out,
               LinearAttentionSaved& saved) override;
  void backward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
                const Tensor& dout, const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
                const Tensor& conv_weight, const Tensor& g, const Tensor& beta,
                const LinearAttentionSaved& saved, const Tensor& dq_raw, const Tensor& dk_raw,
                const Tensor& dv_raw, const Tensor& dconv_weight, const Tensor& dg,
                const Tensor& dbeta) override;

 private:
  Tensor cu_seqlens_;
};

// The local seams together, for one-rank runs and tests.
struct LocalSeams {
  LocalAttentionContext attention;
  LocalExpertDispatcher experts;
  LocalSequenceStatisticsReducer statistics;
  LocalLinearAttentionContext linear_attention;
  BinSeams seams() { return {&attention, &experts, &statistics, &linear_attention}; }
};

}  // namespace dyncp::model
