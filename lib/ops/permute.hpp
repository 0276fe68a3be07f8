#pragma once
// Token permutation to experts and back (the EP = 1 path; expert parallel dispatch exchanges
// the permuted rows group by group).
//
// Every token t has k assignments a = t·k + j (slot j, expert expert_ids[t, j]). The plan sorts
// assignments by expert, stably (token order, then slot), so expert e's rows are
// [expert_offsets[e], expert_offsets[e+1]) of the permuted buffer, ready for
// grouped_linear_forward. Worked example: T = 3, k = 2, E = 3,
//   expert_ids = [[2,0],[0,1],[2,1]] → assignments 0..5 → experts [2,0,0,1,2,1]
//   expert_order  = [1,2,3,5,0,4]  (permuted row r holds assignment expert_order[r])
//   assignment_row = [4,0,1,2,5,3] (inverse)
//   expert_offsets = [0,2,4,6]
//
//   permute:    x_perm[r] = x[expert_order[r] / k]
//   unpermute:  y[t] = Σ_j weights[t, j] · y_perm[assignment_row[t·k + j]]
// Backward: dx[t] = Σ_j dx_perm[assignment_row[t·k + j]];
//   dy_perm[assignment_row[t·k + j]] = weights[t, j] · dy[t];
//   dweights[t, j] = dy[t] · y_perm[assignment_row[t·k + j]].
// All sums run in slot order: deterministic, no atomics.

#include "ops/context.hpp"
#include "ops/router.hpp"

namespace dyncp::ops {

struct PermutePlan {
  Tensor expert_order;    // i32 [T·k]
  Tensor assignment_row;  // i32 [T·k]
  // i64 [E + 1], the grouped_linear group offsets: on the host, or on the op's device, where
  // the grouped products read them without a synchronisation (ops/gemm.hpp).
  Tensor expert_offsets;
  Tensor tokens_per_expert;  // i64 [E] (host; optional: undefined is not filled)
};

// expert_ids: i32 [T, k], every id in [0, num_experts) (else a runtime error naming the token).
// Fills the plan tensors (caller-provided views of the shapes above).
void build_permute_plan(const OpContext& ctx, const Tensor& expert_ids, int num_experts,
                        PermutePlan& plan);

// model.moe_permute_fusion: router_forward (logits [T, E] -> expert_ids, weights, saved.probs),
// build_permute_plan and permute_forward (x [T, h] -> x_perm [T·k, h]) as one op, with the same
// results bit for bit. On CUDA: three launches (kernels/moe_dispatch.hpp) and no host read,
// unless plan.expert_offsets is a host tensor (then it comes down once). Ids come from the
// routing, so they cannot be out of range.
void route_and_permute(const OpContext& ctx, const Tensor& logits, int top_k, bool normalize_top_k,
                       const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                       RouterSaved& saved, PermutePlan& plan, const Tensor& x_perm);

// x: [T, h]; x_perm: [T·k, h].
void permute_forward(const OpContext& ctx, const Tensor& x, const PermutePlan& plan,
                     const Tensor& x_perm);
// dx: [T, h], overwrite or accumulate (dx_mode).
void permute_backward(const OpContext& ctx, const Tensor& dx_perm, const PermutePlan& plan,
                      const Tensor& dx, GradMode dx_mode = GradMode::overwrite);

// y_perm: [T·k, h]; weights: [T, k]; y: [T, h] (overwrite).
void unpermute_forward(const OpContext& ctx, const Tensor& y_perm, const PermutePlan& plan,
                       const Tensor& weights, const Tensor& y);
// dy_perm: [T·k, h] (overwrite); dweights: [T, k] (overwrite; feeds router_backward).
void unpermute_backward(const OpContext& ctx, const Tensor& dy, const Tensor& y_perm,
                        const PermutePlan& plan, const Tensor& weights, const Tensor& dy_perm,
                        const Tensor& dweights);

}  // namespace dyncp::ops
