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
#include "ops/context.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gemm.hpp"
#include "ops/permute.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops/router.hpp"

namespace dyncp::ops {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  virtual void embedding_forward(const OpContext& ctx, const Tensor& token_ids, const Tensor& table,
                                 const Tensor& out);
  virtual void embedding_backward(const OpContext& ctx, const Tensor& token_ids, const Tensor& dout,
                                  const Tensor& dtable);
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
  virtual void router_backward(const OpContext& ctx, const Tensor& dweights,
                               const Tensor& expert_ids, const Tensor& weights,
                               const RouterSaved& saved, bool normalize_top_k,
                               const Tensor& dlogits);
  virtual void build_permute_plan(const OpContext& ctx, const Tensor& expert_ids, int num_experts,
                                  PermutePlan& plan);
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

 protected:
  [[noreturn]] static void unsupported(std::string_view op);
};

// The backend's object lives for the whole process.
void install_device_ops(DeviceOps* ops);
bool has_device_ops();

}  // namespace dyncp::ops
