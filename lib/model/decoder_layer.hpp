#pragma once
// One Qwen3-MoE decoder layer (qwen-moe.md §2.2), forward and backward. Internal to lib/model:
// Qwen3MoeModel owns the activations and calls these per layer.
//
// Shapes: T local rows, h hidden, Hq / Hkv heads, d head_dim, E experts, k experts per token,
// I the (expert or dense) intermediate size.

#include "config/model_architecture.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "model/seams.hpp"
#include "ops/attention.hpp"
#include "ops/moe_aux_loss.hpp"
#include "ops/permute.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/router.hpp"

namespace dyncp::model {

// What a layer's forward keeps for its backward.
struct DecoderLayerActivations {
  Tensor normed_input;  // [T, h]
  ops::RmsNormSaved input_norm;
  Tensor q_raw, k_raw;  // [T, Hq, d], [T, Hkv, d]: projections before the q/k norm
  ops::RmsNormSaved q_norm, k_norm;
  Tensor q, k, v;        // after q/k norm and RoPE (v: the projection)
  Tensor attention_out;  // [T, Hq, d]
  ops::AttentionSaved attention;
  Tensor mid;  // [T, h]: input + attention output (the residual stream between the blocks)
  Tensor normed_mid;
  ops::RmsNormSaved post_attention_norm;
  // Dense MLP layers.
  Tensor dense_gate_up;  // [T, 2I]
  Tensor dense_hidden;   // [T, I]
  // MoE layers.
  ops::RouterSaved router;
  Tensor expert_ids;       // i32 [T, k]
  Tensor routing_weights;  // [T, k]
  ops::PermutePlan plan;
  Tensor y_perm;  // [T·k, h]: expert outputs, unweighted
  ExpertSaved experts;
  Tensor aux_grad_coeff;  // [S, E] when the aux loss is on
};

// Everything a layer needs besides its parameters and activations.
struct LayerRunContext {
  SeamContext seam;
  BinSeams seams;
  const config::ModelArchitecture* architecture = nullptr;
  Tensor positions;   // i32 [T]
  Tensor cu_seqlens;  // i32 [S + 1]
  Tensor token_is_real;  // u8 [T] (1 = real token, 0 = alignment padding) or undefined: all real
  ops::MoeAuxLossType aux_loss = ops::MoeAuxLossType::none;
  std::int64_t aux_num_sequences_global = 1;
  double aux_loss_grad_scale = 1.0;
};

// output [T, h] = layer(input). Saved tensors are allocated from run.seam.activations,
// temporaries from run.seam.scratch. Returns this layer's aux loss (0 when off or dense).
double decoder_layer_forward(const LayerRunContext& run, int layer_index,
                             const DecoderLayerParams& params, const Tensor& input,
                             DecoderLayerActivations& saved, const Tensor& output);

// grad [T, h]: on entry the gradient of the layer output, on return that of its input
// (updated in place). Parameter gradients accumulate. Temporaries from run.seam.scratch.
void decoder_layer_backward(const LayerRunContext& run, int layer_index,
                            const DecoderLayerParams& params, const Tensor& input,
                            const DecoderLayerActivations& saved, const Tensor& grad);

}  // namespace dyncp::model
