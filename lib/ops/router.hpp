#pragma once
// MoE router: softmax → top-k → optional renormalisation (Qwen3-MoE / Next / 3.5; reference
// qwen-moe.md §1.5). The router logits l = x · W_rᵀ come from linear_forward.
//
//   p = softmax(l) over the E experts (compute dtype; fp32 in training)
//   S = the k experts with the largest p, in descending order of p; ties go to the lower index
//   weights_j = p_{S_j}                         (normalize_top_k = false)
//   weights_j = p_{S_j} / Σ_{m∈S} p_m           (normalize_top_k = true; = softmax over S)
//
// Backward (S is not differentiable), with dw the gradient of the weights:
//   normalised:   dl_e = w_e (dw_e − Σ_{m∈S} w_m dw_m) for e ∈ S, 0 elsewhere
//   unnormalised: dp = dw scattered onto S;  dl = p ⊙ (dp − p·dp)
// W_r's gradient then comes from linear_backward.

#include "ops/context.hpp"

namespace dyncp::ops {

struct RouterSaved {
  Tensor probs;  // [T, E]: softmax of the logits, written by forward (also the aux loss input)
};

// logits: [T, E]; expert_ids: i32 [T, k] (output); weights: [T, k] (output).
void router_forward(const OpContext& ctx, const Tensor& logits, int top_k, bool normalize_top_k,
                    const Tensor& expert_ids, const Tensor& weights, RouterSaved& saved);

// Uniform routing (model.moe_router_force_load_balancing): the same softmax into saved.probs,
// but token t's experts come from its position in its sequence, not from p:
//   S_j = (positions[t] * k + j + layer) mod E,  j = 0..k-1   (k distinct experts, k <= E)
// so consecutive tokens of a sequence cycle through the experts and every expert receives the
// same number of a sequence's tokens (to within one). The weights are p_{S_j} (renormalised
// over S when asked), so router_backward's formulas (any fixed S) give the router its gradient.
// Positions are those of the sample, whatever the layout, so every layout routes alike (the
// invariant holds; Megatron's switch draws random logits instead, which no layout reproduces).
// positions: i32 [T].
void balanced_router_forward(const OpContext& ctx, const Tensor& logits, const Tensor& positions,
                             int layer, int top_k, bool normalize_top_k, const Tensor& expert_ids,
                             const Tensor& weights, RouterSaved& saved);

// dweights: [T, k]; dlogits: [T, E], overwrite (the aux loss backward then accumulates into it).
void router_backward(const OpContext& ctx, const Tensor& dweights, const Tensor& expert_ids,
                     const Tensor& weights, const RouterSaved& saved, bool normalize_top_k,
                     const Tensor& dlogits);

}  // namespace dyncp::ops
