#pragma once
// The hybrid layers' and the MoE aux loss's part of the CUDA backend (kernels/hybrid.hpp behind
// the DeviceOps methods of those ops); the backend's class in cuda_ops.cpp derives from it.

#include "ops/device_ops.hpp"

namespace dyncp::ops::cuda {

class CudaHybridOps : public DeviceOps {
 public:
  void moe_aux_loss_statistics(const OpContext& ctx, const Tensor& probs, const Tensor& expert_ids,
                               const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                               const Tensor& counts, const Tensor& prob_sums,
                               bool verify_expert_ids) override;
  double moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts, const Tensor& prob_sums,
                             int top_k, double coef, std::int64_t num_sequences_global,
                             const Tensor& grad_coeff) override;
  void moe_aux_loss_backward(const OpContext& ctx, const Tensor& probs,
                             const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                             const Tensor& grad_coeff, const Tensor& dlogits,
                             double loss_scale) override;
  void sigmoid_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                            const Tensor& out) override;
  void sigmoid_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                             const Tensor& gate, const Tensor& dx, const Tensor& dgate) override;
  void sigmoid_row_gate_forward(const OpContext& ctx, const Tensor& x, const Tensor& gate,
                                const Tensor& out, GradMode out_mode) override;
  void sigmoid_row_gate_backward(const OpContext& ctx, const Tensor& dout, const Tensor& x,
                                 const Tensor& gate, const Tensor& dx,
                                 const Tensor& dgate) override;
  void head_halves(const OpContext& ctx, const Tensor& packed, const Tensor& first,
                   const Tensor& second, bool to_halves) override;
  void gated_delta_gates_forward(const OpContext& ctx, const Tensor& a, const Tensor& b,
                                 const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
                                 const Tensor& beta) override;
  void gated_delta_gates_backward(const OpContext& ctx, const Tensor& dg, const Tensor& dbeta,
                                  const Tensor& a, const Tensor& b, const Tensor& A_log,
                                  const Tensor& dt_bias, const Tensor& da, const Tensor& db,
                                  const Tensor& dA_log, const Tensor& ddt_bias) override;
  void causal_conv1d_silu_forward(const OpContext& ctx, const Tensor& x, const Tensor& weight,
                                  const Tensor& cu_seqlens, const Tensor& y) override;
  void causal_conv1d_silu_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                                   const Tensor& weight, const Tensor& cu_seqlens, const Tensor& dx,
                                   const Tensor& dweight) override;
  void l2norm_forward(const OpContext& ctx, const Tensor& x, double eps, const Tensor& y,
                      L2NormSaved& saved) override;
  void l2norm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y,
                       const L2NormSaved& saved, const Tensor& dx) override;
  void gated_rmsnorm_forward(const OpContext& ctx, const Tensor& x, const Tensor& z,
                             const Tensor& weight, double eps, const Tensor& y,
                             RmsNormSaved& saved) override;
  void gated_rmsnorm_backward(const OpContext& ctx, const Tensor& dy, const Tensor& x,
                              const Tensor& z, const Tensor& weight, const RmsNormSaved& saved,
                              const Tensor& dx, const Tensor& dz, const Tensor& dweight) override;
  void gated_delta_rule_forward(const OpContext& ctx, const GatedDeltaRuleInputs& in,
                                const GatedDeltaRuleParams& params, const Tensor& out,
                                const Tensor& final_state, GatedDeltaRuleSaved& saved) override;
  void gated_delta_rule_backward(const OpContext& ctx, const Tensor& dout,
                                 const Tensor& d_final_state, const GatedDeltaRuleInputs& in,
                                 const GatedDeltaRuleParams& params,
                                 const GatedDeltaRuleSaved& saved,
                                 const GatedDeltaRuleGrads& grads) override;
  void compose_segment_prefixes(const OpContext& ctx, const Tensor& transitions,
                                const Tensor& walk_segments, const Tensor& walk_offsets,
                                std::int64_t first_own, std::int64_t end_own,
                                const Tensor& initial_states) override;
  void compose_segment_suffixes(const OpContext& ctx, const Tensor& transitions,
                                const Tensor& state_grads, const Tensor& walk_segments,
                                const Tensor& walk_offsets, std::int64_t first_own,
                                std::int64_t end_own, const Tensor& final_grads) override;
  void segment_state_grads(const OpContext& ctx, const Tensor& query_maps, const Tensor& dout,
                           const Tensor& cu_seqlens, const Tensor& grads) override;
  void copy_columns(const OpContext& ctx, const Tensor& src, std::int64_t src_col,
                    const Tensor& dst, std::int64_t dst_col, std::int64_t width) override;
  void set_identity_columns(const OpContext& ctx, const Tensor& t, std::int64_t col) override;
};

}  // namespace dyncp::ops::cuda
