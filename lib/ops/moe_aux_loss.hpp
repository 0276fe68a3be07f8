#pragma once
// MoE load-balancing auxiliary loss, defined so that it does not depend on the parallel layout.
//
// Our convention (Megatron's "seq_aux_loss" form, averaged over the GLOBAL batch's sequences):
// for every sequence s, over its real tokens t (padding excluded), with p_{t,e} the router
// softmax probability and S_t the top-k set of token t,
//   c_{s,e} = Σ_t [e ∈ S_t]   (assignment count; Σ_e c_{s,e} = k · n_s, n_s = real tokens of s)
//   P_{s,e} = Σ_t p_{t,e}      (probability sum)
//   L_s     = E / (k · n_s²) · Σ_e c_{s,e} · P_{s,e}       (= E · Σ_e f_e P̄_e with f = c/(k n_s),
//                                                            P̄ = P/n_s; balanced routing gives 1)
//   L_layer = coef · (1 / N_seq) · Σ_{s in the global batch} L_s,   N_seq = sequences in the
//             global batch (all micro-batches, all ranks); the model sums L_layer over MoE layers.
//   ∂L_layer/∂p_{t,e} = coef / N_seq · E / (k · n_s²) · c_{s,e}   (counts are constants), then
//   the softmax backward into the logits.
//
// Against the others (qwen-moe.md §1.6):
// - Megatron "aux_loss" computes coef · E · Σ_e f_e P_e over the whole micro-batch (all tokens
//   pooled); "seq_aux_loss" uses our per-sequence statistics, but per row of its [seq, batch]
//   layout (with packed THD input a row is a whole packed bin, not one document) and averages over
//   the micro-batch's rows, so its value changes with how documents are packed into micro-batches.
//   Per document and averaged over the global batch, ours is identical for any packing and any
//   CP/DP layout. With a single sequence per micro-batch, all three agree.
// - HF load_balancing_loss_func pools all layers' tokens into one matrix and uses
//   E · Σ_e F_e P̄_e with F summing over the k slots (balanced value k, not 1): HF = k × ours for
//   one layer and one sequence. Plain HF SFT does not add it (output_router_logits = false).
//
// Splitting across ranks (context parallelism): a sequence's tokens may live on several ranks of
// a CP group. Each rank calls moe_aux_loss_statistics on its local tokens; the caller sums
// `counts` and `prob_sums` over the CP group (all-reduce; rows are per sequence, so ranks must
// agree on the sequence order), then every rank calls moe_aux_loss_finish with the summed
// statistics. finish returns Σ_s L_s · coef / N_seq over the given sequences: add it on ONE rank
// of the CP group only (or divide by the group size) when reporting the loss; the gradient
// coefficients are right on every rank.
//
// MoeAuxLossType::none: the caller skips all three calls (and no gradient is added).

#include "ops/context.hpp"

namespace dyncp::ops {

enum class MoeAuxLossType { none, seq_aux_loss };

// probs: [T, E] (RouterSaved::probs); expert_ids: i32 [T, k]; seq_cu_seqlens: i32 [S + 1] over
// the local rows (sequence s = rows [cu[s], cu[s+1])); token_is_real: u8 [T] (1 = real token,
// 0 = padding) or undefined (every row real).
// counts, prob_sums: [S, E], same float dtype as probs, OVERWRITTEN with local sums.
// verify_expert_ids false: the ids come from router_forward / route_and_permute, which cannot
// produce one out of range, so the GPU skips reading its id check back (a synchronisation in
// every MoE layer); out-of-range ids are then ignored by the kernel, never written out of bounds.
void moe_aux_loss_statistics(const OpContext& ctx, const Tensor& probs, const Tensor& expert_ids,
                             const Tensor& seq_cu_seqlens, const Tensor& token_is_real,
                             const Tensor& counts, const Tensor& prob_sums,
                             bool verify_expert_ids = true);

// counts, prob_sums: [S, E] summed over the ranks holding each sequence. top_k: k; coef:
// router_aux_loss_coef; num_sequences_global: N_seq (> 0).
// grad_coeff: [S, E] (output) = coef / N_seq · E / (k · n_s²) · c_{s,e} (0 for sequences with no
// real token). Returns coef / N_seq · Σ_s L_s (double).
double moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts, const Tensor& prob_sums,
                           int top_k, double coef, std::int64_t num_sequences_global,
                           const Tensor& grad_coeff);

// The same, with the value written to loss_out (f64 [1] on the op's device) instead of
// returned: on the GPU it then stays in device memory, and the model reads every layer's value
// back in one copy per bin instead of one per MoE layer.
void moe_aux_loss_finish(const OpContext& ctx, const Tensor& counts, const Tensor& prob_sums,
                         int top_k, double coef, std::int64_t num_sequences_global,
                         const Tensor& grad_coeff, const Tensor& loss_out);

// dlogits[t] += p_t ⊙ (g_s − p_t·g_s) for real tokens t of sequence s, g_s = grad_coeff[s]
// (ACCUMULATES into the router's dlogits; loss_scale multiplies the gradient).
void moe_aux_loss_backward(const OpContext& ctx, const Tensor& probs, const Tensor& seq_cu_seqlens,
                           const Tensor& token_is_real, const Tensor& grad_coeff,
                           const Tensor& dlogits, double loss_scale = 1.0);

}  // namespace dyncp::ops
