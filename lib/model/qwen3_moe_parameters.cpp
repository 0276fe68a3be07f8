#include "model/qwen3_moe_parameters.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace dyncp::model {

namespace {

using core::DType;
using core::Shape;

// Parameters are laid out in declaration order inside one buffer; offsets are rounded to 16
// floats (64 bytes) so every tensor starts cache-line aligned.
struct Layout {
  struct Entry {
    Param* param;
    Shape shape;
    std::int64_t offset;
  };
  std::vector<Entry> entries;
  std::int64_t total = 0;
  void add(Param& param, Shape shape) {
    entries.push_back({&param, shape, total});
    total += (shape.numel() + 15) / 16 * 16;
  }
};

bool is_norm_weight(const std::string& name) {
  return name.ends_with("norm.weight");
}

}  // namespace

void validate_qwen3_moe_architecture(const config::ModelArchitecture& a) {
  if (a.model_type != "qwen3_moe")
    core::throw_config_error("model.model_type", "'" + a.model_type +
                                                     "' is not supported by this model; expected "
                                                     "qwen3_moe");
  const auto positive = [](std::int64_t value, const char* field) {
    if (value <= 0)
      core::throw_config_error(std::string("model.") + field,
                               std::to_string(value) + ": must be > 0");
  };
  positive(a.vocab_size, "vocab_size");
  positive(a.hidden_size, "hidden_size");
  positive(a.num_hidden_layers, "num_hidden_layers");
  positive(a.num_attention_heads, "num_attention_heads");
  positive(a.num_key_value_heads, "num_key_value_heads");
  positive(a.head_dim, "head_dim");
  if (a.num_attention_heads % a.num_key_value_heads != 0)
    core::throw_config_error("model.num_key_value_heads",
                             std::to_string(a.num_key_value_heads) +
                                 ": must divide num_attention_heads (" +
                                 std::to_string(a.num_attention_heads) + ")");
  if (a.head_dim % 2 != 0)
    core::throw_config_error("model.head_dim",
                             std::to_string(a.head_dim) + ": must be even for RoPE");
  if (a.hidden_act != "silu")
    core::throw_config_error("model.hidden_act", "'" + a.hidden_act + "': only silu is supported");
  if (a.attention_bias)
    core::throw_config_error("model.attention_bias", "true: attention biases are not supported");
  bool any_moe = false, any_dense = false;
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i)
    (a.is_moe_layer(i) ? any_moe : any_dense) = true;
  if (any_moe) {
    positive(a.moe_intermediate_size, "moe_intermediate_size");
    if (a.num_experts_per_tok <= 0 || a.num_experts_per_tok > a.num_experts)
      core::throw_config_error("model.num_experts_per_tok",
                               std::to_string(a.num_experts_per_tok) + ": must be in [1, " +
                                   "num_experts = " + std::to_string(a.num_experts) + "]");
  }
  if (any_dense) positive(a.intermediate_size, "intermediate_size");
}

Qwen3MoeParameters::Qwen3MoeParameters(const config::ModelArchitecture& architecture,
                                       ExpertRange experts)
    : architecture_(architecture), expert_range_(experts) {
  architecture_.resolve();
  validate_qwen3_moe_architecture(architecture_);
  const auto& a = architecture_;
  if (expert_range_.count == 0) expert_range_.count = a.num_experts;
  if (expert_range_.first < 0 || expert_range_.count < 0 ||
      expert_range_.first + expert_range_.count > a.num_experts)
    core::throw_config_error("model.num_experts",
                             "expert range [" + std::to_string(expert_range_.first) + ", " +
                                 std::to_string(expert_range_.first + expert_range_.count) +
                                 ") does not fit in " + std::to_string(a.num_experts) + " experts");
  const std::int64_t local_experts = expert_range_.count;
  const std::int64_t h = a.hidden_size, d = a.head_dim, hq = a.num_attention_heads,
                     hkv = a.num_key_value_heads, e = a.num_experts,
                     moe_i = a.moe_intermediate_size, dense_i = a.intermediate_size;

  Layout layout;
  layout.add(embed_tokens, {a.vocab_size, h});
  layers.resize(static_cast<std::size_t>(a.num_hidden_layers));
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i) {
    auto& layer = layers[static_cast<std::size_t>(i)];
    layer.is_moe = a.is_moe_layer(i);
    layout.add(layer.input_norm, {h});
    layout.add(layer.attention.q_proj, {hq * d, h});
    layout.add(layer.attention.k_proj, {hkv * d, h});
    layout.add(layer.attention.v_proj, {hkv * d, h});
    layout.add(layer.attention.o_proj, {h, hq * d});
    layout.add(layer.attention.q_norm, {d});
    layout.add(layer.attention.k_norm, {d});
    layout.add(layer.post_attention_norm, {h});
    if (layer.is_moe) {
      layout.add(layer.moe.router, {e, h});
      layer.moe.experts.first_expert = expert_range_.first;
    } else {
      layout.add(layer.dense.gate_up, {2 * dense_i, h});
      layout.add(layer.dense.down, {h, dense_i});
    }
  }
  layout.add(final_norm, {h});
  if (!a.tie_word_embeddings) layout.add(lm_head, {a.vocab_size, h});
  // Expert weights after every dense one: each group is one contiguous range, so gradient
  // reductions over the pool (dense) and over the expert-data-parallel group are one call each.
  dense_numel_ = layout.total;
  for (auto& layer : layers) {
    if (!layer.is_moe) continue;
    layout.add(layer.moe.experts.gate_up, {local_experts, 2 * moe_i, h});
    layout.add(layer.moe.experts.down, {local_experts, h, moe_i});
  }

  all_values_ = Tensor::zeros({layout.total}, DType::f32);
  all_grads_ = Tensor::zeros({layout.total}, DType::f32);
  for (const auto& entry : layout.entries) {
    const std::int64_t end = entry.offset + entry.shape.numel();
    entry.param->value = all_values_.slice(entry.offset, end).reshape(entry.shape);
    entry.param->grad = all_grads_.slice(entry.offset, end).reshape(entry.shape);
  }
  if (a.tie_word_embeddings) lm_head = embed_tokens;

  // HF names (qwen-moe.md §4.2), in checkpoint order.
  const auto add_hf = [this](std::string name, const Param& param, bool is_expert = false) {
    hf_tensors_.push_back({std::move(name), param.value, param.grad, is_expert});
  };
  const auto rows_of = [](const Param& param, std::int64_t begin, std::int64_t end) {
    return Param{param.value.slice(begin, end), param.grad.slice(begin, end)};
  };
  const auto select = [](const Param& param, std::int64_t index) {
    return Param{param.value.select(index), param.grad.select(index)};
  };
  add_hf("model.embed_tokens.weight", embed_tokens);
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i) {
    const auto& layer = layers[static_cast<std::size_t>(i)];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    add_hf(prefix + "input_layernorm.weight", layer.input_norm);
    add_hf(prefix + "self_attn.q_proj.weight", layer.attention.q_proj);
    add_hf(prefix + "self_attn.k_proj.weight", layer.attention.k_proj);
    add_hf(prefix + "self_attn.v_proj.weight", layer.attention.v_proj);
    add_hf(prefix + "self_attn.o_proj.weight", layer.attention.o_proj);
    add_hf(prefix + "self_attn.q_norm.weight", layer.attention.q_norm);
    add_hf(prefix + "self_attn.k_norm.weight", layer.attention.k_norm);
    add_hf(prefix + "post_attention_layernorm.weight", layer.post_attention_norm);
    if (layer.is_moe) {
      add_hf(prefix + "mlp.gate.weight", layer.moe.router);
      for (std::int64_t local = 0; local < local_experts; ++local) {
        const std::int64_t expert = expert_range_.first + local;
        const std::string expert_prefix = prefix + "mlp.experts." + std::to_string(expert) + ".";
        const Param gate_up = select(layer.moe.experts.gate_up, local);
        add_hf(expert_prefix + "gate_proj.weight", rows_of(gate_up, 0, moe_i), true);
        add_hf(expert_prefix + "up_proj.weight", rows_of(gate_up, moe_i, 2 * moe_i), true);
        add_hf(expert_prefix + "down_proj.weight", select(layer.moe.experts.down, local), true);
      }
    } else {
      add_hf(prefix + "mlp.gate_proj.weight", rows_of(layer.dense.gate_up, 0, dense_i));
      add_hf(prefix + "mlp.up_proj.weight", rows_of(layer.dense.gate_up, dense_i, 2 * dense_i));
      add_hf(prefix + "mlp.down_proj.weight", layer.dense.down);
    }
  }
  add_hf("model.norm.weight", final_norm);
  if (!a.tie_word_embeddings) add_hf("lm_head.weight", lm_head);
}

const HfTensor* Qwen3MoeParameters::find(const std::string& hf_name) const {
  for (const auto& tensor : hf_tensors_)
    if (tensor.name == hf_name) return &tensor;
  return nullptr;
}

void Qwen3MoeParameters::init_random(std::uint64_t seed, double init_std) const {
  for (std::size_t index = 0; index < hf_tensors_.size(); ++index) {
    const auto& tensor = hf_tensors_[index];
    float* values = tensor.value.data<float>();
    const std::int64_t count = tensor.value.numel();
    if (is_norm_weight(tensor.name)) {
      for (std::int64_t j = 0; j < count; ++j) values[j] = 1.0f;
      continue;
    }
    // Box-Muller on two counter-based uniforms per element: independent of thread count and
    // of how tensors are laid out in memory.
    for (std::int64_t j = 0; j < count; ++j) {
      const auto bits = core::random_bits(seed, core::RngPurpose::weight_init, index,
                                          static_cast<std::uint64_t>(j));
      const double u1 = (static_cast<double>(bits >> 40) + 1.0) * 0x1.0p-24;
      const double u2 = static_cast<double>(bits & 0xffffffu) * 0x1.0p-24;
      values[j] =
          static_cast<float>(init_std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  }
}

}  // namespace dyncp::model
