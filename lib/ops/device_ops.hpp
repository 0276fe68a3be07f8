#pragma once
// The ops on Device::cuda. Each entry point in this folder checks its arguments once, then
// dispatches: CPU code runs here, and a CUDA context goes to the DeviceOps a CUDA backend
// installed at start-up (lib/ops/cuda/: the kernels/ implementations, built against the real
// CUDA toolkit or against the emulated backend). The layers above never see the difference.
//
// Every method has the same arguments as its entry point and the same contract (docs/ops.md);
// arguments arrive already checked. An op the backend does not implement keeps the base
// class's body, which refuses with an error naming the op, never a silent CPU fallback.

#include <span>
#include <string_view>

#include "ops/adamw.hpp"
#include "ops/attention.hpp"
#include "ops/causal_conv1d.hpp"
#include "ops/context.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gated_delta_gates.hpp"
#include "ops/gated_delta_rule.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/gemm.hpp"
#include "ops/head_halves.hpp"
#include "ops/l2norm.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/permute.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops/router.hpp"
#include "ops/segment_states.hpp"
#include "ops/sigmoid_gate.hpp"
#include "ops/vocab_parallel_cross_entropy.hpp"
#include "ops/vocab_shard.hpp"

namespace dyncp::ops {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  virtual void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                                 const Tensor& out);
  virtual void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                                  const Tensor& dtable, std::int64_t padding_idx);
  virtual void embedding_shard_forward(const OpContext& ctx, const Tensor& token_ids,
                                       const Tensor& table, const VocabShardRange& shard,
                                       const Tensor& out);
  virtual void embedding_shard_backward(const OpContext& ctx, const Tensor& token_ids,
                                        const Tensor& dout, const Tensor& dtable,
                                        const VocabShardRange& shard, std::int64_t padding_idx);
  virtual void rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                               double eps, RmsNormVariant variant, const Tensor& y,
                               RmsNormSaved& saved);
  virtual void rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                const Tensor& weight, RmsNormVariant variant,
                                const RmsNormSaved& saved, const Tensor& dx, const Tensor& dweight,
                                GradMode dx_mode);
  // inverse: the backward rotation (rope_backward).
  virtual void rope(const OpContext& ctx, const Tensor& x, const Tensor& positions,
                    const RopeParams& params, const Tensor& y, bool inverse);
  virtual void swiglu_forward(const OpContext& ctx, const Tensor& gate, const Tensor& up,
                              const Tensor& out);
  virtual void swiglu_backward(const OpContext& ctx, const Tensor& dout, const Tensor& gate,
                               const Tensor& up, const Tensor& dgate, const Tensor& dup);
  virtual void swiglu_fused_forward(const OpContext& ctx, const Tensor& gate_up, const Tensor& out);
  virtual void swiglu_fused_backward(const OpContext& ctx, const Tensor& dout,
                                     const Tensor& gate_up, const Tensor& dgate_up);
  virtual void router_forward(const OpContext& ctx, const Tensor& logits, int top_k,
                              bool normalize_top_k, const Tensor& expert_ids, const Tensor& weights,
                              RouterSaved& saved);
  virtual void balanced_router_forward(const OpContext& ctx, const Tensor& logits,
                                       const Tensor& positions, int layer, int top_k,
                                       bool normalize_top_k, const Tensor& expert_ids,
                                       const Tensor& weights, RouterSaved& saved);
  virtual void router_backward(const OpContext& ctx, const Tensor& dweights,
                               const Tensor& expert_ids, const Tensor& weights,
                               const RouterSaved& saved, bool normalize_top_k,
                               const Tensor& dlogits);
  virtual void build_permute_plan(const OpContext& ctx, const Tensor& expert_ids, int num_experts,
                                  PermutePlan& plan);
  virtual void route_and_permute(const OpContext& ctx, const Tensor& logits, int top_k,
                                 bool normalize_top_k, const Tensor& x, const Tensor& expert_ids,
                                 const Tensor& weights, RouterSaved& saved, PermutePlan& plan,
                                 const Tensor& x_perm);
  virtual void permute_forward(const OpContext& ctx, const Tensor& x, const PermutePlan& plan,
                               const Tensor& x_perm);
  virtual void permute_backward(const OpContext& ctx, const Tensor& dx_perm,
                                const PermutePlan& plan, const Tensor& dx, GradMode dx_mode);
  virtual void unpermute_forward(const OpContext& ctx, const Tensor& y_perm,
                                 const PermutePlan& plan, const Tensor& weights, const Tensor& y);
  virtual void unpermute_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y_perm,
                                  const PermutePlan& plan, const Tensor& weights,
                                  const Tensor& dy_perm, const Tensor& dweights);
  virtual void add(const OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
  // f32 <-> bf16 (ops::convert; round to nearest even).
  virtual void convert(const OpContext& ctx, const Tensor& src, const Tensor& dst);
  virtual void gemm(const OpContext& ctx, const Tensor& a, Transpose transpose_a, const Tensor& b,
                    Transpose transpose_b, const Tensor& c, double alpha, bool accumulate);
  // Rows [offsets[g], offsets[g + 1]) use weight[g]; `host_offsets` is the HOST copy of the
  // group offsets (one explicit synchronisation per expert layer, counted by the caller).
  virtual void grouped_linear_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                                      const Tensor& host_offsets, const Tensor& y);
  virtual void grouped_linear_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                       const Tensor& weight, const Tensor& host_offsets,
                                       const Tensor& dx, const Tensor& dweight, GradMode dx_mode);
  virtual CrossEntropyResult fused_cross_entropy(const OpContext& ctx, const Tensor& hidden,
                                                 const Tensor& lm_weight, const Tensor& labels,
                                                 const Tensor& loss_mask,
                                                 const Tensor& per_token_loss,
                                                 const Tensor& dhidden, const Tensor& dlm_weight,
                                                 const CrossEntropyOptions& options);
  // The vocabulary-parallel LM head + cross-entropy (ops/vocab_parallel_cross_entropy.hpp).
  virtual void vocab_shard_logsumexp(const OpContext& ctx, const Tensor& hidden,
                                     const Tensor& lm_weight_shard, const VocabShardRange& shard,
                                     const Tensor& labels, const Tensor& loss_mask,
                                     const Tensor& shard_lse, const Tensor& target_logit,
                                     const CrossEntropyOptions& options);
  virtual void combine_shard_logsumexp(const OpContext& ctx, const Tensor& shard_lses,
                                       const Tensor& lse);
  virtual CrossEntropyResult vocab_shard_cross_entropy(
      const OpContext& ctx, const Tensor& hidden, const Tensor& lm_weight_shard,
      const VocabShardRange& shard, const Tensor& labels, const Tensor& loss_mask,
      const Tensor& lse, const Tensor& target_logit, const Tensor& per_token_loss,
      const Tensor& dhidden, const Tensor& dlm_weight, const CrossEntropyOptions& options);
  virtual void attention_forward(const OpContext& ctx, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const VarlenAttentionLayout& layout, double scale,
                                 const Tensor& out, AttentionSaved& saved);
  virtual void attention_backward(const OpContext& ctx, const Tensor& dout, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& out,
                                  const AttentionSaved& saved, const VarlenAttentionLayout& layout,
                                  double scale, const Tensor& dq, const Tensor& dk,
                                  const Tensor& dv, AttentionGradModes modes);
  virtual void attention_merge(const OpContext& ctx, const Tensor& out_acc, const Tensor& lse_acc,
                               const Tensor& out_part, const Tensor& lse_part);
  virtual void adamw_step(const OpContext& ctx, const Tensor& param, const Tensor& grad,
                          const Tensor& exp_avg, const Tensor& exp_avg_sq,
                          const AdamWParams& params, bool apply_weight_decay);
  virtual double sum_of_squares(const OpContext& ctx, const Tensor& x);

  // The hybrid layers and the MoE aux loss (bodies in device_ops_hybrid.cpp). The gated delta
  // rule has one pair for both forms (chunked and recurrent compute the same function).
  virtual void moe_aux_loss_statistics(const OpContext& ctx, const Tensor& probs,
                                       const Tensor& expert_ids, const Tensor& seq_cu_seqlens,
                                       const Tensor& token_is_real, const Tensor& counts,
                                       const Tensor& prob_sums, bool verify_expert_ids);
  virtual void moe_aux_loss_finish_to_device(const OpContext& ctx, const Tensor& counts,
                                             const Tensor& prob_sums, int top_k, double coef,
                                             std::int64_t num_sequences_global,
                                             const Tensor& grad_coeff, const Tensor& loss_out);
  virtual double moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts,
                                     const Tensor& prob_sums, int top_k, double coef,
                                     std::int64_t num_sequences_global, const Tensor& grad_coeff);
  virtual void moe_aux_loss_backward(const OpContext& ctx, const Tensor& probs,
                                     const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                                     const Tensor& grad_coeff, const Tensor& dlogits,
                                     double loss_scale);
  virtual void sigmoid_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                                    const Tensor& out);
  virtual void sigmoid_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                                     const Tensor& gate, const Tensor& dx, const Tensor& dgate);
  virtual void sigmoid_row_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                                        const Tensor& out, GradMode out_mode);
  virtual void sigmoid_row_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                                         const Tensor& gate, const Tensor& dx, const Tensor& dgate);
  // to_halves: split_head_halves, else merge_head_halves.
  virtual void head_halves(const OpContext& ctx, const Tensor& packed, const Tensor& first,
                           const Tensor& second, bool to_halves);
  virtual void gated_delta_gates_forward(const OpContext& ctx, const Tensor& a, const Tensor& b,
                                         const Tensor& A_log, const Tensor& dt_bias,
                                         const Tensor& g, const Tensor& beta);
  virtual void gated_delta_gates_backward(const OpContext& ctx, const Tensor& dg,
                                          const Tensor& dbeta, const Tensor& a, const Tensor& b,
                                          const Tensor& A_log, const Tensor& dt_bias,
                                          const Tensor& da, const Tensor& db, const Tensor& dA_log,
                                          const Tensor& ddt_bias);
  virtual void causal_conv1d_silu_forward(const OpContext& ctx, const Tensor& x,
                                          const Tensor& weight, const Tensor& cu_seqlens,
                                          const Tensor& y);
  virtual void causal_conv1d_silu_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                           const Tensor& weight, const Tensor& cu_seqlens,
                                           const Tensor& dx, const Tensor& dweight);
  virtual void l2norm_forward(const OpContext& ctx, const Tensor& x, double eps, const Tensor& y,
                              L2NormSaved& saved);
  virtual void l2norm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y,
                               const L2NormSaved& saved, const Tensor& dx);
  virtual void gated_rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& z,
                                     const Tensor& weight, double eps, const Tensor& y,
                                     RmsNormSaved& saved);
  virtual void gated_rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                      const Tensor& z, const Tensor& weight,
                                      const RmsNormSaved& saved, const Tensor& dx, const Tensor& dz,
                                      const Tensor& dweight);
  virtual void gated_delta_rule_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                        const GatedDeltaRuleParams& params, const Tensor& out,
                                        const Tensor& final_state, GatedDeltaRuleSaved& saved);
  virtual void gated_delta_rule_backward(const OpContext& ctx, const Tensor& dout,
                                         const Tensor& d_final_state,
                                         const GatedDeltaRuleInputs& in,
                                         const GatedDeltaRuleParams& params,
                                         const GatedDeltaRuleSaved& saved,
                                         const GatedDeltaRuleGrads& grads);
  virtual void compose_segment_prefixes(const OpContext& ctx, const Tensor& transitions,
                                        const Tensor& walk_segments, const Tensor& walk_offsets,
                                        std::int64_t first_own, std::int64_t end_own,
                                        const Tensor& initial_states);
  virtual void compose_segment_suffixes(const OpContext& ctx, const Tensor& transitions,
                                        const Tensor& state_grads, const Tensor& walk_segments,
                                        const Tensor& walk_offsets, std::int64_t first_own,
                                        std::int64_t end_own, const Tensor& final_grads);
  virtual void segment_state_grads(const OpContext& ctx, const Tensor& query_maps,
                                   const Tensor& dout, const Tensor& cu_seqlens,
                                   const Tensor& grads);
  virtual void copy_columns(const OpContext& ctx, const Tensor& src, std::int64_t src_col,
                            const Tensor& dst, std::int64_t dst_col, std::int64_t width);
  virtual void set_identity_columns(const OpContext& ctx, const Tensor& t, std::int64_t col);

 protected:
  [[noreturn]] static void unsupported(std::string_view op);
};

// The backend's object lives for the whole process.
void install_device_ops(DeviceOps* ops);
bool has_device_ops();

}  // namespace dyncp::ops
