// Model architecture keys: HF config.json names under `model.`, with the Megatron/Bridge
// spellings as aliases so Bridge recipes carry over.

#include <limits>

#include "config/key_builder.hpp"

namespace dyncp::config::detail {

void append_model_architecture_keys(std::vector<KeySpec>& keys) {
  auto model_type = make_key("model.model_type", DYNCP_FIELD(model.architecture.model_type),
                             "HF model_type: the architecture family");
  model_type.type = KeyType::choice;
  model_type.choices = {"qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"};
  keys.push_back(std::move(model_type));
  keys.push_back(make_key("model.vocab_size", DYNCP_FIELD(model.architecture.vocab_size),
                          "Vocabulary size (embedding and LM-head rows)",
                          {.aliases = {"model.padded_vocab_size"}}));
  keys.push_back(make_key("model.hidden_size", DYNCP_FIELD(model.architecture.hidden_size),
                          "Residual stream width"));
  keys.push_back(make_key(
      "model.intermediate_size", DYNCP_FIELD(model.architecture.intermediate_size),
      "Dense MLP width (layers in mlp_only_layers only)", {.aliases = {"model.ffn_hidden_size"}}));
  keys.push_back(make_key("model.num_hidden_layers",
                          DYNCP_FIELD(model.architecture.num_hidden_layers), "Decoder layers",
                          {.aliases = {"model.num_layers"}}));
  keys.push_back(make_key("model.num_attention_heads",
                          DYNCP_FIELD(model.architecture.num_attention_heads), "Query heads",
                          {.rules = "divisible by num_key_value_heads"}));
  keys.push_back(make_key("model.num_key_value_heads",
                          DYNCP_FIELD(model.architecture.num_key_value_heads),
                          "Key/value heads (GQA groups)", {.aliases = {"model.num_query_groups"}}));
  keys.push_back(make_key("model.head_dim", DYNCP_FIELD(model.architecture.head_dim),
                          "Attention head dimension; 0: hidden_size / num_attention_heads",
                          {.min = 0,
                           .rules = "0 needs hidden_size divisible by num_attention_heads",
                           .aliases = {"model.kv_channels"}}));
  keys.push_back(make_key("model.max_position_embeddings",
                          DYNCP_FIELD(model.architecture.max_position_embeddings),
                          "Context length the checkpoint was trained for"));
  keys.push_back(make_key("model.rms_norm_eps", DYNCP_FIELD(model.architecture.rms_norm_eps),
                          "RMSNorm epsilon",
                          {.rules = "> 0", .aliases = {"model.layernorm_epsilon"}}));
  keys.push_back(make_key("model.rope_theta", DYNCP_FIELD(model.architecture.rope_theta),
                          "RoPE base", {.rules = "> 0", .aliases = {"model.rotary_base"}}));
  keys.push_back(make_key("model.partial_rotary_factor",
                          DYNCP_FIELD(model.architecture.partial_rotary_factor),
                          "Fraction of head_dim that is rotated (hybrid models)",
                          {.rules = "in (0, 1]", .aliases = {"model.rotary_percent"}}));
  keys.push_back(make_key("model.attention_bias", DYNCP_FIELD(model.architecture.attention_bias),
                          "Bias on the q/k/v projections", {.aliases = {"model.add_qkv_bias"}}));
  keys.push_back(make_key("model.tie_word_embeddings",
                          DYNCP_FIELD(model.architecture.tie_word_embeddings),
                          "LM head shares the embedding matrix",
                          {.aliases = {"model.share_embeddings_and_output_weights"}}));
  keys.push_back(make_key("model.hidden_act", DYNCP_FIELD(model.architecture.hidden_act),
                          "MLP activation", {.rules = "must be silu"}));
  keys.push_back(make_key("model.num_experts", DYNCP_FIELD(model.architecture.num_experts),
                          "Routed experts per MoE layer; 0: dense model",
                          {.min = 0,
                           .rules = "divisible by model.expert_model_parallel_size",
                           .aliases = {"model.num_moe_experts", "model.num_local_experts"}}));
  keys.push_back(make_key("model.num_experts_per_tok",
                          DYNCP_FIELD(model.architecture.num_experts_per_tok),
                          "Experts each token is routed to (top-k)",
                          {.rules = "<= num_experts", .aliases = {"model.moe_router_topk"}}));
  keys.push_back(make_key("model.moe_intermediate_size",
                          DYNCP_FIELD(model.architecture.moe_intermediate_size),
                          "Routed expert MLP width", {.aliases = {"model.moe_ffn_hidden_size"}}));
  keys.push_back(make_key("model.decoder_sparse_step",
                          DYNCP_FIELD(model.architecture.decoder_sparse_step),
                          "Layer i is MoE when (i + 1) % step == 0"));
  keys.push_back(make_key("model.mlp_only_layers", DYNCP_FIELD(model.architecture.mlp_only_layers),
                          "Layers with a dense MLP instead of MoE",
                          {.min = 0, .rules = "each < num_hidden_layers"}));
  keys.push_back(make_key("model.norm_topk_prob", DYNCP_FIELD(model.architecture.norm_topk_prob),
                          "Renormalise the top-k router weights to sum to 1"));
  keys.push_back(make_key("model.router_aux_loss_coef",
                          DYNCP_FIELD(model.architecture.router_aux_loss_coef),
                          "Load-balancing loss coefficient",
                          {.rules = ">= 0", .aliases = {"model.moe_aux_loss_coeff"}}));
  keys.push_back(make_key("model.shared_expert_intermediate_size",
                          DYNCP_FIELD(model.architecture.shared_expert_intermediate_size),
                          "Shared expert MLP width; 0: none",
                          {.min = 0, .aliases = {"model.moe_shared_expert_intermediate_size"}}));
  keys.push_back(make_key("model.layer_types", DYNCP_FIELD(model.architecture.layer_types),
                          "Token mixer per layer (hybrid models); empty: derived from "
                          "full_attention_interval",
                          {.rules = "one entry per layer"}));
  keys.push_back(make_key("model.full_attention_interval",
                          DYNCP_FIELD(model.architecture.full_attention_interval),
                          "Hybrid models: layer i is full attention when (i + 1) % interval == 0"));
  keys.push_back(make_key("model.linear_num_key_heads",
                          DYNCP_FIELD(model.architecture.linear_num_key_heads),
                          "Gated DeltaNet key heads"));
  keys.push_back(make_key(
      "model.linear_num_value_heads", DYNCP_FIELD(model.architecture.linear_num_value_heads),
      "Gated DeltaNet value heads", {.rules = "divisible by linear_num_key_heads"}));
  keys.push_back(make_key("model.linear_key_head_dim",
                          DYNCP_FIELD(model.architecture.linear_key_head_dim),
                          "Gated DeltaNet key head dimension"));
  keys.push_back(make_key("model.linear_value_head_dim",
                          DYNCP_FIELD(model.architecture.linear_value_head_dim),
                          "Gated DeltaNet value head dimension"));
  keys.push_back(make_key("model.linear_conv_kernel_dim",
                          DYNCP_FIELD(model.architecture.linear_conv_kernel_dim),
                          "Gated DeltaNet causal convolution width"));
  keys.push_back(make_key("model.bos_token_id", DYNCP_FIELD(model.architecture.bos_token_id),
                          "Beginning-of-sequence token id; -1: none", {.min = -1}));
  keys.push_back(make_key("model.eos_token_id", DYNCP_FIELD(model.architecture.eos_token_id),
                          "End-of-sequence token id; -1: none", {.min = -1}));
}

}  // namespace dyncp::config::detail
