#pragma once
// The model's seams: the places where a layer would need other ranks. The layers call
// these interfaces and never know how many ranks take part; lib/model ships the single-rank
// implementations (local_seams.hpp), the distributed runtime supplies CP / EP ones.
//
// - AttentionContext: causal attention over the tokens of this rank's part of the bin. Under
//   context parallelism a rank holds zigzag chunks k and 2c−1−k of every sequence of its bin
//   (c = runtime CP group size), each token with its GLOBAL position; the CP implementations
//   all-gather K/V over the runtime group in forward and reduce-scatter dK/dV in backward, or
//   pass K/V blocks (and dK/dV accumulators) round the group as a ring.
// - ExpertDispatcher: runs the experts on tokens already permuted by expert. The EP
//   implementation all-to-alls the rows to the ranks owning their experts and back.
// - SequenceStatisticsReducer: sums per-sequence MoE aux-loss statistics over the ranks that
//   hold parts of the same sequences (the CP group); the identity on one rank.
// - LinearAttentionContext: the sequence-level part of a Gated DeltaNet layer (conv window and
//   recurrent state run along whole sequences); under CP it needs the earlier chunks' inputs.
//
// Every call gets a SeamContext: the op context plus two arenas. `activations` lives for the
// whole bin (forward writes what backward reads); `scratch` is for temporaries, released by the
// caller after each layer.

#include <cmath>
#include <cstdint>
#include <functional>

#include "core/arena.hpp"
#include "ops/attention.hpp"
#include "ops/context.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/l2norm.hpp"

namespace dyncp::model {

using core::Tensor;

struct SeamContext {
  ops::OpContext ops;
  core::Arena* activations = nullptr;
  core::Arena* scratch = nullptr;
  // Host memory for the few values the host must know whatever the device (the experts' group
  // offsets, which size the grouped products and the expert exchange); lives for the bin.
  core::Arena* host = nullptr;
  // Saved activations in bf16 storage (ModelOptions::bf16_activations): the expert dispatcher
  // then moves its rows in bf16 and y_perm is a bf16 tensor.
  bool bf16_activations = false;

  // Host memory for the bin: `host`, or the activations when there is none (they are then
  // host memory themselves).
  core::Arena& host_arena() const { return host != nullptr ? *host : *activations; }
};

// What a rank holds of the current bin, as the attention sees it.
struct LocalBinLayout {
  Tensor cu_seqlens;      // i32 [S + 1]: local rows of sequence s are [cu[s], cu[s+1])
  Tensor positions;       // i32 [T]: global position of each local row inside its sequence
  Tensor host_positions;  // the same on the host; undefined: `positions` is on the host
  std::int32_t sliding_window = 0;  // the model's attention window (0: none); see ops::attention
};

// A parameter value and its gradient (same shape; the gradient accumulates).
struct Param {
  Tensor value;
  Tensor grad;
};

class AttentionContext {
 public:
  virtual ~AttentionContext() = default;
  // Called once per bin before the first layer (the CP implementation sizes its gather
  // buffers and derives the gathered K/V layout here). The tensors stay valid for the bin.
  virtual void begin_bin(const SeamContext& context, const LocalBinLayout& layout) = 0;
  // q [T, Hq, d], k / v [T, Hkv, d] for the local rows (RoPE already applied with global
  // positions). Writes out [T, Hq, d] and saved.lse [T, Hq] (caller-allocated).
  virtual void forward(const SeamContext& context, int layer, const Tensor& q, const Tensor& k,
                       const Tensor& v, double scale, const Tensor& out,
                       ops::AttentionSaved& saved) = 0;
  // Called before the layer's backward starts (its MLP part runs first) with the k / v its
  // attention backward will read, which exist from the forward (or its recomputation): a CP
  // implementation may start their exchange now, so that it travels beside the MLP backward.
  // Buffers come from context.scratch, which the caller holds until the layer's backward
  // returns. The default does nothing.
  virtual void prepare_backward(const SeamContext& /*context*/, int /*layer*/, const Tensor& /*k*/,
                                const Tensor& /*v*/) {}
  // dq, dk, dv for the local rows: overwrite. The CP implementation reduce-scatters the
  // gathered dK/dV so every rank gets exactly its own rows' gradients.
  virtual void backward(const SeamContext& context, int layer, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out,
                        const ops::AttentionSaved& saved, double scale, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv) = 0;
};

// Expert weights of one MoE layer as this rank holds them: experts
// [first_expert, first_expert + gate_up.value.size(0)).
//   gate_up [E_local, 2I, h]: rows [0, I) = HF gate_proj, rows [I, 2I) = HF up_proj
//   down    [E_local, h, I]
struct ExpertWeights {
  Param gate_up;
  Param down;
  std::int64_t first_expert = 0;
};

// What an expert computation keeps for its backward. An EP implementation stores the rows it
// received (and their group offsets) here; the local one aliases the inputs.
struct ExpertSaved {
  Tensor rows;           // [R, h] expert inputs as computed on this rank
  Tensor group_offsets;  // i64 [E_local + 1] host
  Tensor gate_up;        // [R, 2I]
  Tensor hidden;         // [R, I]: silu(gate) ⊙ up; undefined when recompute_hidden
  // Set by the layer before forward (selective recomputation of moe_act): hidden is then only a
  // temporary of the forward and the backward recomputes it from gate_up.
  bool recompute_hidden = false;
};

class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  // x_perm [R, h]: rows grouped by GLOBAL expert, expert_offsets i64 [E + 1] (host). Writes
  // y_perm [R, h], the unweighted expert outputs of the same rows (weighting and un-permuting
  // happen in the layer). Saved state is allocated from context.activations.
  // y_perm is f32, or bf16 under SeamContext::bf16_activations.
  virtual void forward(const SeamContext& context, int layer, const Tensor& x_perm,
                       const Tensor& expert_offsets, const ExpertWeights& weights,
                       const Tensor& y_perm, ExpertSaved& saved) = 0;
  // forward, with work that reads none of the routed rows (the hybrid's shared expert under
  // model.moe_shared_expert_overlap) run while the rows travel to their experts' owners and
  // before the experts run. `beside` must not touch x_perm or y_perm. The default (nothing
  // in flight on one rank) runs it first.
  virtual void forward_beside(const SeamContext& context, int layer, const Tensor& x_perm,
                              const Tensor& expert_offsets, const ExpertWeights& weights,
                              const Tensor& y_perm, ExpertSaved& saved,
                              const std::function<void()>& beside) {
    beside();
    forward(context, layer, x_perm, expert_offsets, weights, y_perm, saved);
  }
  // Whether the backward reads x_perm itself (ExpertSaved::rows aliases it): then the layer
  // keeps it for the bin; otherwise (rows sent to other ranks) it is a forward temporary.
  virtual bool keeps_x_perm() const { return true; }
  // dx_perm [R, h]: overwrite. Expert weight gradients accumulate.
  virtual void backward(const SeamContext& context, int layer, const Tensor& dy_perm,
                        const Tensor& expert_offsets, const ExpertWeights& weights,
                        const ExpertSaved& saved, const Tensor& dx_perm) = 0;
};

class SequenceStatisticsReducer {
 public:
  virtual ~SequenceStatisticsReducer() = default;
  // counts, prob_sums: [S, E] local sums per sequence of the bin; in place, sum them over the
  // ranks holding parts of the same sequences (same sequence order on every such rank).
  virtual void reduce(const SeamContext& context, const Tensor& counts,
                      const Tensor& prob_sums) = 0;
};

// Sizes of a Gated DeltaNet layer as its sequence-level part sees them.
struct LinearAttentionDims {
  std::int64_t key_heads = 0, key_head_dim = 0;      // Hk, dk
  std::int64_t value_heads = 0, value_head_dim = 0;  // Hv, dv
  int chunk_size = 64;                               // chunked recurrence (training)

  // The gated delta rule's settings for these sizes: q scaled by 1/sqrt(dk), chunk_size.
  ops::GatedDeltaRuleParams rule_params() const {
    return {1.0 / std::sqrt(static_cast<double>(key_head_dim)), chunk_size};
  }
};

// L2-norm epsilon of q and k (HF / FLA's l2norm, qwen-moe.md §3.4 step 4); not the config's
// rms_norm_eps. Every implementation of the seam uses it, so their results agree.
inline constexpr double linear_attention_l2norm_eps = 1e-6;

// What the sequence-level part of a DeltaNet layer keeps for its backward (local rows; a CP
// implementation keeps its gathered tensors in its own state, keyed by layer).
struct LinearAttentionSaved {
  Tensor q, k;  // [T, Hk, dk]: conv + SiLU + L2 norm
  Tensor v;     // [T, Hv, dv]: conv + SiLU
  ops::L2NormSaved q_norm, k_norm;
  ops::GatedDeltaRuleSaved rule;
};

// The sequence-level part of a Gated DeltaNet layer (qwen-moe.md §3.4 steps 2, 4, 5): the
// causal depthwise conv + SiLU over q / k / v, L2 norm of q and k, and the gated delta rule.
// Everything before (projections, gates) and after (gated norm, out_proj) is per token and
// stays in the layer. Each sequence starts from a zero state and a zero conv window.
// Under context parallelism a rank holds zigzag chunks k and 2c−1−k of each sequence; a CP
// implementation gathers the sequence's inputs (q/k/v before the conv, g, beta) over the
// runtime group, runs whole sequences and keeps this rank's rows (or hands chunk-boundary
// states along), and in backward returns exactly this rank's rows' input gradients.
class LinearAttentionContext {
 public:
  virtual ~LinearAttentionContext() = default;
  // Called once per bin before the first layer; the tensors stay valid for the bin.
  virtual void begin_bin(const SeamContext& context, const LocalBinLayout& layout) = 0;
  // q_raw, k_raw [T, Hk, dk], v_raw [T, Hv, dv]: the projections before the conv.
  // conv_weight [2·Hk·dk + Hv·dv, K] (channel order q | k | v). g, beta [T, Hv]: log decay and
  // write strength. Writes out [T, Hv, dv] (before the gated output norm). Saved tensors come
  // from context.activations.
  virtual void forward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
                       const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
                       const Tensor& conv_weight, const Tensor& g, const Tensor& beta,
                       const Tensor& out, LinearAttentionSaved& saved) = 0;
  // dq_raw, dk_raw, dv_raw, dg, dbeta for the local rows: overwrite. dconv_weight accumulates
  // the contribution of THIS rank's rows only (so a sum over the group is the whole gradient).
  virtual void backward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
                        const Tensor& dout, const Tensor& q_raw, const Tensor& k_raw,
                        const Tensor& v_raw, const Tensor& conv_weight, const Tensor& g,
                        const Tensor& beta, const LinearAttentionSaved& saved, const Tensor& dq_raw,
                        const Tensor& dk_raw, const Tensor& dv_raw, const Tensor& dconv_weight,
                        const Tensor& dg, const Tensor& dbeta) = 0;
};

class TensorParallelContext;  // tensor_parallel.hpp

// The seams one bin runs with. linear_attention is needed only by models with Gated DeltaNet
// layers, tensor_parallel only under tensor parallelism (nullptr: one TP rank).
struct BinSeams {
  AttentionContext* attention = nullptr;
  ExpertDispatcher* experts = nullptr;
  SequenceStatisticsReducer* statistics = nullptr;
  LinearAttentionContext* linear_attention = nullptr;
  TensorParallelContext* tensor_parallel = nullptr;
};

}  // namespace dyncp::model
