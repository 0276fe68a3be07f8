#pragma once
// Variable-length causal GQA attention on THD (packed tokens, no batch dim), shaped for context
// parallelism from the start.
//
// Sequences. Queries and keys are both grouped by sequence with their own cu_seqlens:
// sequence s owns query rows [q_cu_seqlens[s], q_cu_seqlens[s+1]) and key/value rows
// [kv_cu_seqlens[s], kv_cu_seqlens[s+1]). Each row carries its GLOBAL position inside its
// sequence (q_positions, kv_positions). Query i sees key j of the same sequence iff
// kv_positions[j] <= q_positions[i] (causal by position, block-diagonal by sequence; see
// sliding_window below). Rows need
// not be contiguous positions: a CP rank's queries are zigzag chunks (with group size c a
// sequence of length L is cut into 2c chunks; rank k holds chunks k and 2c−1−k — e.g. c = 2,
// L = 8: rank 0 holds positions {0,1,6,7}, rank 1 holds {2,3,4,5}); keys may be the whole
// sequence (all-gathered) or any block of it (ring step), in any order.
// Empty sequences (zero query or zero key rows) are allowed.
//
// Shapes: q [Tq, Hq, d]; k, v [Tk, Hkv, d]; Hq a multiple of Hkv; query head hq uses kv head
// hq / (Hq / Hkv) (consecutive query heads share a kv head). out [Tq, Hq, d];
// lse [Tq, Hq] (same float dtype): natural-log sum of exp of the scaled scores over the visible
// keys, −inf when a query sees no key (its out row is then 0).
//
//   S_ij = scale · q_i·k_j (scale = 1/sqrt(d) for Qwen, full head_dim even with partial RoPE)
//   lse_i = log Σ_{j visible} exp(S_ij),  P_ij = exp(S_ij − lse_i),  out_i = Σ_j P_ij v_j
//
// Computed in tiles with an online softmax: memory is O(tokens), never O(L²).
//
// Backward (flash style: P is recomputed per tile from the saved lse):
//   D_i = dout_i · out_i,  dV_j = Σ_i P_ij dout_i,  dP_ij = dout_i · v_j,
//   dS_ij = P_ij (dP_ij − D_i),  dq_i = scale Σ_j dS_ij k_j,  dk_j = scale Σ_i dS_ij q_i;
//   dK, dV are summed over the query heads that share a kv head.
// Splitting the keys into blocks: run forward per block and fold the partial results with
// attention_merge; for backward pass the FINAL (merged) out and lse with each block: the block's
// dk/dv are then exact and its dq contributions add up (use GradMode::accumulate for dq).

#include "ops/context.hpp"

namespace dyncp::ops {

struct VarlenAttentionLayout {
  Tensor q_cu_seqlens;   // i32 [S + 1], starts at 0, non-decreasing, ends at Tq
  Tensor kv_cu_seqlens;  // i32 [S + 1], starts at 0, non-decreasing, ends at Tk
  Tensor q_positions;    // i32 [Tq], >= 0
  Tensor kv_positions;   // i32 [Tk], >= 0
  // Sliding window w > 0: query i also does not see key j when q_positions[i] −
  // kv_positions[j] >= w (HF's sliding_window: the query and the w − 1 positions before it).
  // Positions are global, so under CP the window is on the whole sequence. 0: none. CPU and
  // CUDA (kernels/attention.hpp).
  std::int32_t sliding_window = 0;
};

struct AttentionSaved {
  Tensor lse;  // [Tq, Hq], written by forward; backward needs it together with out
};

struct AttentionGradModes {
  GradMode dq = GradMode::overwrite;
  GradMode dk = GradMode::overwrite;
  GradMode dv = GradMode::overwrite;
};

// Needs no scratch in fp32; with bf16 products (OpContext::precision) ctx.scratch holds the
// bf16-rounded copies of q, k, v.
void attention_forward(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                       const VarlenAttentionLayout& layout, double scale, const Tensor& out,
                       AttentionSaved& saved);

// dq [Tq, Hq, d], dk / dv [Tk, Hkv, d]: overwrite or accumulate per `modes`. No parameters.
// Needs ctx.scratch (Tq·Hq elements for D).
void attention_backward(const OpContext& ctx, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const AttentionSaved& saved,
                        const VarlenAttentionLayout& layout, double scale, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, AttentionGradModes modes = {});

// Folds a partial result over another block of keys into an accumulated one, row by row:
//   lse = log(exp(lse_acc) + exp(lse_part))
//   out = exp(lse_acc − lse) · out_acc + exp(lse_part − lse) · out_part
// out_acc / lse_acc are updated in place. Shapes: out [Tq, Hq, d], lse [Tq, Hq]. Rows with
// −inf on one side take the other side unchanged.
void attention_merge(const OpContext& ctx, const Tensor& out_acc, const Tensor& lse_acc,
                     const Tensor& out_part, const Tensor& lse_part);

// Reference: the same maths with whole score rows, O(L) memory per query, no tiling. For tests
// and benches only (slow).
void attention_forward_reference(const OpContext& ctx, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const VarlenAttentionLayout& layout, double scale,
                                 const Tensor& out, const Tensor& lse);

}  // namespace dyncp::ops
