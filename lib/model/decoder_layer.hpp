#pragma once
// One decoder layer, forward and backward: Qwen3-MoE (qwen-moe.md §2.2) or the hybrid
// Qwen3-Next / Qwen3.5 layer (§3.2: zero-centred norms, gated attention or Gated DeltaNet,
// MoE with a shared expert). Internal to lib/model:
// Qwen3MoeModel owns the activations and calls these per layer.
//
// Shapes: T local rows, h hidden, Hq / Hkv heads, d head_dim, E experts, k experts per token,
// I the (expert or dense) intermediate size.

#include <span>

#include "config/model_architecture.hpp"
#include "config/recompute_modules.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/seams.hpp"
#include "ops/attention.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/permute.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/router.hpp"

namespace dyncp::model {

// What a Gated DeltaNet mixer keeps for its backward (Hk / Hv heads, dk / dv head dims).
struct GatedDeltaNetActivations {
  Tensor q_raw, k_raw;  // [T, Hk, dk]: projections before the conv
  Tensor v_raw;         // [T, Hv, dv]
  Tensor z;             // [T, Hv, dv]: gate input of the output norm
  Tensor a, b;          // [T, Hv]: decay and write-strength projections
  Tensor g, beta;       // [T, Hv]: log decay, write strength
  LinearAttentionSaved core;
  Tensor core_out;    // [T, Hv, dv]: the recurrence output
  Tensor normed_out;  // [T, Hv, dv]: gated RMSNorm output, out_proj's input
  ops::RmsNormSaved out_norm;
};

// What a layer's forward keeps for its backward.
struct DecoderLayerActivations {
  // [T, h]. The two residual norms' outputs are undefined after a forward that recomputes them
  // (LayerRunContext::recompute.layernorm): backward rebuilds them from the kept norm input.
  Tensor normed_input;
  ops::RmsNormSaved input_norm;
  // Full-attention layers.
  Tensor q_raw, k_raw;  // [T, Hq, d], [T, Hkv, d]: projections before the q/k norm
  ops::RmsNormSaved q_norm, k_norm;
  Tensor q, k, v;        // after q/k norm and RoPE (v: the projection)
  Tensor attention_out;  // [T, Hq, d]
  ops::AttentionSaved attention;
  Tensor attention_gate;       // [T, Hq, d] gated attention only: the gate logits
  Tensor gated_attention_out;  // [T, Hq, d] gated attention only: attention_out ⊙ σ(gate)
  // Gated DeltaNet layers.
  GatedDeltaNetActivations linear;
  Tensor mid;  // [T, h]: input + attention output (the residual stream between the blocks)
  Tensor normed_mid;
  ops::RmsNormSaved post_attention_norm;
  // Dense MLP layers.
  Tensor dense_gate_up;  // [T, 2I] (undefined when the backward recomputes the MLP)
  Tensor dense_hidden;   // [T, I]
  // MoE layers.
  ops::RouterSaved router;
  Tensor expert_ids;       // i32 [T, k]
  Tensor routing_weights;  // [T, k]
  ops::PermutePlan plan;
  Tensor y_perm;  // [T·k, h]: expert outputs, unweighted
  ExpertSaved experts;
  Tensor aux_grad_coeff;  // [S, E] when the aux loss is on
  // Tensor parallelism: the MoE block routes part of the bin's rows on each TP rank (its
  // share under sequence parallelism, else a slice); cu_seqlens clipped to them (host i32).
  Tensor moe_cu_seqlens;
  // Shared expert (hybrid family): SwiGLU [T, 2Is] / [T, Is], its output [T, h] and gate logit
  // (under tensor parallelism SwiGLU on every row and the rank's columns, output and logit on
  // the MoE block's rows).
  // shared_hidden is undefined when the backward recomputes the MoE activation, and
  // shared_gate_up too when it recomputes the whole shared expert.
  Tensor shared_gate_up, shared_hidden, shared_out;
  Tensor shared_gate_logit;  // [T, 1]
};

// Everything a layer needs besides its parameters and activations.
struct LayerRunContext {
  SeamContext seam;
  BinSeams seams;
  const config::ModelArchitecture* architecture = nullptr;
  Tensor positions;      // i32 [T]
  Tensor cu_seqlens;     // i32 [S + 1]
  Tensor token_is_real;  // u8 [T] (1 = real token, 0 = alignment padding) or undefined: all real
  // Real tokens of each whole sequence (PackedBin::sequence_lengths); filled for dynamic RoPE
  // only, whose frequencies depend on it.
  std::span<const std::int64_t> sequence_lengths;
  ops::MoeAuxLossType aux_loss = ops::MoeAuxLossType::none;
  std::int64_t aux_num_sequences_global = 1;
  double aux_loss_grad_scale = 1.0;
  // f64 [layers, 1] in device memory, or undefined: each MoE layer writes its aux loss to its row
  // (decoder_layer_forward then returns 0 for it) instead of copying it to the host; the model
  // reads all rows back in one copy per bin.
  Tensor aux_losses;
  // Selective recomputation (Megatron's recompute_modules). moe_act: the routed and shared
  // experts' SwiGLU outputs (the down projections' inputs) are not kept; backward recomputes
  // them from the kept gate_up. layernorm: the outputs of the input and post-attention norms
  // are not kept; backward recomputes them from the kept norm inputs. mlp (dense layers) and
  // shared_experts (the hybrid's shared expert): the SwiGLU MLP keeps only its input; backward
  // recomputes gate_up and the SwiGLU output from it. All re-run the same ops on the same
  // inputs, so the gradients are bitwise those of a run that keeps them.
  config::SelectiveRecompute recompute;
  // The MoE layer's GPU kernels (docs/model.md "MoE dispatch"): moe_grouped_gemm keeps the
  // expert offsets in device memory and runs each expert projection as one grouped launch
  // (false: host offsets, one product per expert, a synchronisation per layer);
  // moe_permute_fusion routes, plans and permutes in one op (ops::route_and_permute).
  // Neither changes a number: the CPU runs the same ops either way.
  bool moe_grouped_gemm = true;
  bool moe_permute_fusion = true;
  // model.moe_shared_expert_overlap: the hybrid's shared expert runs inside the expert
  // dispatcher's forward, while the routed rows travel (ExpertDispatcher::forward_beside).
  bool moe_shared_expert_overlap = false;
  // model.moe_router_force_load_balancing: experts from the token positions
  // (ops::balanced_router_forward), through the unfused plan and permutation.
  bool moe_router_force_load_balancing = false;
  // model.sequence_parallel: under tensor parallelism (seams.tensor_parallel of more than one
  // rank) the residual stream holds this rank's 1/tp of the rows (tensor_parallel.hpp).
  bool sequence_parallel = false;
};

// output [T, h] = layer(input), T the layer's rows (under sequence parallelism this rank's
// share of the bin's rows; positions and cu_seqlens always describe every row). Saved tensors are
// allocated from run.seam.activations, temporaries from run.seam.scratch. Returns this layer's aux
// loss (0 when off or dense).
double decoder_layer_forward(const LayerRunContext& run, int layer_index,
                             const DecoderLayerParams& params, const Tensor& input,
                             DecoderLayerActivations& saved, const Tensor& output);

// grad [T, h]: on entry the gradient of the layer output, on return that of its input
// (updated in place). Parameter gradients accumulate. Temporaries from run.seam.scratch.
void decoder_layer_backward(const LayerRunContext& run, int layer_index,
                            const DecoderLayerParams& params, const Tensor& input,
                            const DecoderLayerActivations& saved, const Tensor& grad);

// The residual norms' variant: plain for Qwen3-MoE, zero-centred (1 + w) for the hybrid family.
ops::RmsNormVariant residual_norm_variant(const config::ModelArchitecture& architecture);

// Gated DeltaNet token mixer (gated_deltanet_mixer.cpp), on saved.normed_input [T, h]:
// forward ADDS its output to `residual` [T, h]; backward takes d(residual) and writes
// d(normed_input) (overwrite). Parameter gradients accumulate.
void gated_deltanet_forward(const LayerRunContext& run, int layer_index,
                            const GatedDeltaNetParams& params, GatedDeltaNetActivations& saved,
                            const Tensor& normed_input, const Tensor& residual);
void gated_deltanet_backward(const LayerRunContext& run, int layer_index,
                             const GatedDeltaNetParams& params,
                             const GatedDeltaNetActivations& saved, const Tensor& normed_input,
                             const Tensor& dresidual, const Tensor& dnormed_input);

}  // namespace dyncp::model
