#pragma once
// The tiny models the layout and tensor-parallelism tests train: a Qwen3-MoE of two layers (a
// dense one, then a MoE one) and the hybrid family at the same scale (qwen-moe.md §8 config B,
// shrunk: a Gated DeltaNet layer then a gated full-attention layer, every MLP a MoE with a
// shared expert). `heads` / `kv_heads` are the attention's (and, in the hybrid, the DeltaNet's
// value / key heads).

#include "config/model_architecture.hpp"

namespace dyncp::testing {

inline config::ModelArchitecture tiny_qwen3_moe(int heads = 4, int kv_heads = 2,
                                                int head_dim = 12) {
  config::ModelArchitecture a;
  a.model_type = "qwen3_moe";
  a.vocab_size = 96;
  a.hidden_size = 32;
  a.intermediate_size = 40;
  a.num_hidden_layers = 2;
  a.num_attention_heads = heads;
  a.num_key_value_heads = kv_heads;
  a.head_dim = head_dim;
  a.num_experts = 8;
  a.num_experts_per_tok = 2;
  a.moe_intermediate_size = 20;
  a.mlp_only_layers = {0};
  a.norm_topk_prob = true;
  a.rope_theta = 10000.0;
  a.router_aux_loss_coef = 0.01;
  a.resolve();
  return a;
}

inline config::ModelArchitecture tiny_hybrid(int heads = 4, int kv_heads = 2, int head_dim = 16) {
  config::ModelArchitecture a;
  a.model_type = "qwen3_5_moe_text";
  a.vocab_size = 96;
  a.hidden_size = 32;
  a.num_hidden_layers = 2;
  a.layer_types = {config::LayerMixer::linear_attention, config::LayerMixer::full_attention};
  a.num_attention_heads = heads;
  a.num_key_value_heads = kv_heads;
  a.head_dim = head_dim;
  a.partial_rotary_factor = 0.25;
  a.linear_num_key_heads = kv_heads;
  a.linear_num_value_heads = heads;
  a.linear_key_head_dim = 8;
  a.linear_value_head_dim = 8;
  a.linear_conv_kernel_dim = 4;
  a.num_experts = 8;
  a.num_experts_per_tok = 2;
  a.moe_intermediate_size = 20;
  a.shared_expert_intermediate_size = 24;
  a.norm_topk_prob = true;
  a.rope_theta = 10000.0;
  a.router_aux_loss_coef = 0.01;
  a.resolve();
  return a;
}

}  // namespace dyncp::testing
