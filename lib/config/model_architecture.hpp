#pragma once
// The model's architecture, in Hugging Face `config.json` field names. One struct serves both
// families: Qwen3-MoE (`qwen3_moe`) and the hybrid Qwen3-Next / Qwen3.5-MoE
// (`qwen3_next`, `qwen3_5_moe`, `qwen3_5_moe_text`). Fields a family does not use keep their
// defaults. Derived values (head_dim when absent, layer types from full_attention_interval, ...)
// are filled by `resolve()`, never guessed at the point of use.

#include <cstdint>
#include <string>
#include <vector>

namespace dyncp::config {

enum class LayerMixer { full_attention, linear_attention };

// config.json rope_parameters (transformers 5.x) / rope_scaling (4.x) beyond rope_theta and
// partial_rotary_factor, in HF field names. rope_type default, linear, dynamic, yarn or llama3
// (others are refused on load); dynamic is honoured where it equals default RoPE (model rules).
struct RopeScalingFields {
  std::string rope_type = "default";
  double factor = 1.0;
  double original_max_position_embeddings = 0.0;  // 0: max_position_embeddings (yarn, llama3)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 0.0;  // 0: derived (yarn)
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

struct ModelArchitecture {
  std::string model_type = "qwen3_moe";
  std::int64_t vocab_size = 151936;
  std::int64_t hidden_size = 2048;
  std::int64_t intermediate_size = 6144;  // dense MLP layers only
  std::int64_t num_hidden_layers = 24;
  std::int64_t num_attention_heads = 32;
  std::int64_t num_key_value_heads = 4;
  std::int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads (filled by resolve)
  std::int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // fraction of head_dim that is rotated
  RopeScalingFields rope_scaling;
  // Sliding-window attention (use_sliding_window with sliding_window): a query sees the keys
  // at most sliding_window - 1 positions before it, on every layer, as transformers 5.x
  // Qwen3-MoE does. 0: full causal attention.
  std::int64_t sliding_window = 0;
  // pad_token_id: the embedding row that gets no gradient from the lookup (nn.Embedding's
  // padding_idx). -1: none.
  std::int64_t pad_token_id = -1;
  bool attention_bias = false;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";

  // Mixture of experts.
  std::int64_t num_experts = 128;
  std::int64_t num_experts_per_tok = 8;
  std::int64_t moe_intermediate_size = 768;
  std::int64_t decoder_sparse_step = 1;
  std::vector<std::int64_t> mlp_only_layers;
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.001;
  std::int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert

  // Hybrid (Qwen3-Next / Qwen3.5): per-layer token mixer and Gated DeltaNet dims.
  std::vector<LayerMixer> layer_types;  // empty for qwen3_moe (all full attention)
  std::int64_t full_attention_interval = 4;
  std::int64_t linear_num_key_heads = 16;
  std::int64_t linear_num_value_heads = 32;
  std::int64_t linear_key_head_dim = 128;
  std::int64_t linear_value_head_dim = 128;
  std::int64_t linear_conv_kernel_dim = 4;

  std::int64_t bos_token_id = -1;
  std::int64_t eos_token_id = -1;

  bool is_hybrid() const {
    return model_type == "qwen3_next" || model_type == "qwen3_5_moe" ||
           model_type == "qwen3_5_moe_text";
  }
  // Layer i is MoE iff not listed in mlp_only_layers, experts exist, and (i+1) % step == 0.
  bool is_moe_layer(std::int64_t layer) const;
  LayerMixer mixer_of_layer(std::int64_t layer) const;
  // The rotated width: HF's int(head_dim · partial_rotary_factor), rounded up to even.
  std::int64_t rotary_dim() const;
  // HF's int(head_dim · partial_rotary_factor) itself: the width the frequencies spread over.
  std::int64_t rope_frequency_dim() const;

  // Fill derived fields (head_dim, layer_types). Idempotent.
  void resolve();
};

// Read an HF `config.json` (a file, or a folder holding one). Accepts the nested `text_config`
// of multimodal Qwen3.5 checkpoints and `rope_parameters` (transformers 5.x) next to top-level
// `rope_theta`. Throws a data error naming the file and field on malformed input.
ModelArchitecture load_hf_model_config(const std::string& path);

// True for an HF checkpoint folder with weights: config.json and model.safetensors (or its
// model.safetensors.index.json). A Megatron torch_dist checkpoint is not one.
bool has_hf_weights(const std::string& folder);

// The inverse, for HF export: the fields transformers needs to rebuild the model.
std::string to_hf_config_json(const ModelArchitecture& architecture);

}  // namespace dyncp::config
