#include "model/qwen3_moe_parameters.hpp"

#include <algorithm>
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
  std::int64_t dense_total = 0;  // the dense parameters come first, then the experts
  void add(Param& param, Shape shape) {
    total = (total + 15) / 16 * 16;
    add_adjacent(param, shape);
  }
  // Right after the previous parameter, no alignment gap: views can span both.
  void add_adjacent(Param& param, Shape shape) {
    entries.push_back({&param, shape, total});
    total += shape.numel();
  }
};

bool is_norm_weight(const std::string& name) {
  return name.ends_with("norm.weight");
}

// Gated q_proj: HF row 2d·j + i of head j is query row d·j + i (i < d) or gate row
// Hq·d + d·j + (i − d) of our [query rows | gate rows] storage (qwen-moe.md §3.3).
std::vector<std::int64_t> gated_query_rows(std::int64_t heads, std::int64_t head_dim) {
  std::vector<std::int64_t> rows;
  for (std::int64_t j = 0; j < heads; ++j)
    for (std::int64_t i = 0; i < 2 * head_dim; ++i)
      rows.push_back(i < head_dim ? j * head_dim + i
                                  : heads * head_dim + j * head_dim + i - head_dim);
  return rows;
}

// Qwen3-Next in_proj_qkvz: Hk groups of [q_g (dk) | k_g (dk) | v_g (r·dv) | z_g (r·dv)],
// r = Hv / Hk, over our storage [q all | k all | v all | z all] (qwen-moe.md §3.4 step 1).
std::vector<std::int64_t> next_qkvz_rows(const config::ModelArchitecture& a) {
  const std::int64_t hk = a.linear_num_key_heads, dk = a.linear_key_head_dim,
                     dv = a.linear_value_head_dim, r = a.linear_num_value_heads / hk;
  const std::int64_t key_dim = hk * dk, value_dim = a.linear_num_value_heads * dv;
  std::vector<std::int64_t> rows;
  for (std::int64_t g = 0; g < hk; ++g) {
    for (std::int64_t i = 0; i < dk; ++i) rows.push_back(g * dk + i);
    for (std::int64_t i = 0; i < dk; ++i) rows.push_back(key_dim + g * dk + i);
    for (std::int64_t i = 0; i < r * dv; ++i) rows.push_back(2 * key_dim + g * r * dv + i);
    for (std::int64_t i = 0; i < r * dv; ++i)
      rows.push_back(2 * key_dim + value_dim + g * r * dv + i);
  }
  return rows;
}

// Qwen3-Next in_proj_ba: Hk groups of [b_g (r) | a_g (r)] over our storage [b all | a all].
std::vector<std::int64_t> next_ba_rows(const config::ModelArchitecture& a) {
  const std::int64_t hk = a.linear_num_key_heads, hv = a.linear_num_value_heads, r = hv / hk;
  std::vector<std::int64_t> rows;
  for (std::int64_t g = 0; g < hk; ++g) {
    for (std::int64_t i = 0; i < r; ++i) rows.push_back(g * r + i);
    for (std::int64_t i = 0; i < r; ++i) rows.push_back(hv + g * r + i);
  }
  return rows;
}

}  // namespace

namespace {

// Row r of `table` (row-major, `columns` wide, f32 or f64) as floats, and back.
// The members a layout plan places (the real ones, or stand-ins when only counting).
struct ParameterSlots {
  Param& embed_tokens;
  std::vector<DecoderLayerParams>& layers;
  Param& final_norm;
  Param& lm_head;
};

// The whole-model layers a part holds, ascending.
std::vector<std::int64_t> held_layer_ids(const config::ModelArchitecture& a,
                                         const ModelPart& part) {
  std::vector<std::int64_t> ids;
  if (part.layers.empty()) {
    for (std::int64_t i = 0; i < a.num_hidden_layers; ++i) ids.push_back(i);
    return ids;
  }
  for (const ModelPart::LayerRun& run : part.layers) {
    if (run.first < 0 || run.count < 0 || run.first + run.count > a.num_hidden_layers ||
        (!ids.empty() && run.first <= ids.back()))
      core::throw_runtime_error(
          "model part: layer runs must be ascending, disjoint and inside the "
          "model's " +
          std::to_string(a.num_hidden_layers) + " layers");
    for (std::int64_t i = run.first; i < run.first + run.count; ++i) ids.push_back(i);
  }
  return ids;
}

// HF tensors of whole-model layer i (every expert): what a part skips over when it does not
// hold the layer, so its own tensors keep their whole-model indices.
std::size_t hf_tensors_of_layer(const config::ModelArchitecture& a, std::int64_t i) {
  std::size_t count = 2;  // input and post-attention norms
  if (a.mixer_of_layer(i) == config::LayerMixer::full_attention)
    count += 6;  // q, k, v, o projections, q and k norms
  else
    count += (a.model_type == "qwen3_next" ? 2 : 4) + 5;  // projections, conv, A, dt, norm, out
  if (a.is_moe_layer(i))
    count += 1 + (a.is_hybrid() ? 4 : 0) + 3 * static_cast<std::size_t>(a.num_experts);
  else
    count += 3;
  return count;
}

// Where every parameter lives in the flat buffers, for an architecture, the experts a rank
// holds and the layers (embedding, head) of its part: the one plan behind both the allocation
// and parameter_count(), so the memory estimate counts exactly what is allocated.
Layout plan_layout(const config::ModelArchitecture& a, const ExpertRange& experts,
                   ParameterSlots slots, const std::vector<std::int64_t>& layer_ids,
                   bool embedding = true, bool head = true) {
  const std::int64_t local_experts = experts.count;
  const std::int64_t h = a.hidden_size, d = a.head_dim, hq = a.num_attention_heads,
                     hkv = a.num_key_value_heads, e = a.num_experts,
                     moe_i = a.moe_intermediate_size, dense_i = a.intermediate_size;

  const bool hybrid = a.is_hybrid();
  const std::int64_t key_dim = a.linear_num_key_heads * a.linear_key_head_dim,
                     value_dim = a.linear_num_value_heads * a.linear_value_head_dim,
                     conv_dim = 2 * key_dim + value_dim, hv = a.linear_num_value_heads,
                     shared_i = a.shared_expert_intermediate_size;

  Layout layout;
  // A last stage's tied head is a copy of the embedding.
  if (embedding || (head && a.tie_word_embeddings))
    layout.add(slots.embed_tokens, {a.vocab_size, h});
  slots.layers.resize(layer_ids.size());
  for (std::size_t position = 0; position < layer_ids.size(); ++position) {
    const std::int64_t i = layer_ids[position];
    auto& layer = slots.layers[position];
    layer.is_moe = a.is_moe_layer(i);
    layer.mixer = a.mixer_of_layer(i);
    layout.add(layer.input_norm, {h});
    if (layer.mixer == config::LayerMixer::full_attention) {
      // q_proj then q_gate_proj: together HF's q_proj rows (row-ordered view below).
      layout.add(layer.attention.q_proj, {hq * d, h});
      if (hybrid) layout.add_adjacent(layer.attention.q_gate_proj, {hq * d, h});
      layout.add(layer.attention.k_proj, {hkv * d, h});
      layout.add(layer.attention.v_proj, {hkv * d, h});
      layout.add(layer.attention.o_proj, {h, hq * d});
      layout.add(layer.attention.q_norm, {d});
      layout.add(layer.attention.k_norm, {d});
    } else {
      auto& gdn = layer.linear_attention;
      // qkv | z | b | a back to back: Qwen3-Next's fused projections view across them.
      layout.add(gdn.in_proj_qkv, {conv_dim, h});
      layout.add_adjacent(gdn.in_proj_z, {value_dim, h});
      layout.add_adjacent(gdn.in_proj_b, {hv, h});
      layout.add_adjacent(gdn.in_proj_a, {hv, h});
      layout.add(gdn.conv1d, {conv_dim, 1, a.linear_conv_kernel_dim});
      layout.add(gdn.A_log, {hv});
      layout.add(gdn.dt_bias, {hv});
      layout.add(gdn.norm, {a.linear_value_head_dim});
      layout.add(gdn.out_proj, {h, value_dim});
    }
    layout.add(layer.post_attention_norm, {h});
    if (layer.is_moe) {
      layout.add(layer.moe.router, {e, h});
      layer.moe.experts.first_expert = experts.first;
      if (hybrid) {
        layer.moe.has_shared_expert = true;
        layout.add(layer.moe.shared_expert.gate_up, {2 * shared_i, h});
        layout.add(layer.moe.shared_expert.down, {h, shared_i});
        layout.add(layer.moe.shared_expert_gate, {1, h});
      }
    } else {
      layout.add(layer.dense.gate_up, {2 * dense_i, h});
      layout.add(layer.dense.down, {h, dense_i});
    }
  }
  if (head) {
    layout.add(slots.final_norm, {h});
    if (!a.tie_word_embeddings) layout.add(slots.lm_head, {a.vocab_size, h});
  }
  // Expert weights after every dense one: each group is one contiguous range, so gradient
  // reductions over the pool (dense) and over the expert-data-parallel group are one call each.
  layout.dense_total = layout.total;
  for (auto& layer : slots.layers) {
    if (!layer.is_moe) continue;
    layout.add(layer.moe.experts.gate_up, {local_experts, 2 * moe_i, h});
    layout.add(layer.moe.experts.down, {local_experts, h, moe_i});
  }

  return layout;
}

void copy_row_out(const Tensor& table, std::int64_t row, std::int64_t columns, float* out) {
  if (table.dtype() == DType::f64) {
    const double* from = table.data<double>() + row * columns;
    for (std::int64_t j = 0; j < columns; ++j) out[j] = static_cast<float>(from[j]);
  } else {
    const float* from = table.data<float>() + row * columns;
    std::copy(from, from + columns, out);
  }
}

void copy_row_in(const float* in, const Tensor& table, std::int64_t row, std::int64_t columns) {
  if (table.dtype() == DType::f64) {
    double* to = table.data<double>() + row * columns;
    for (std::int64_t j = 0; j < columns; ++j) to[j] = in[j];
  } else {
    std::copy(in, in + columns, table.data<float>() + row * columns);
  }
}

}  // namespace

void HfTensor::read_hf_order(const Tensor& source, float* hf) const {
  if (rows.empty()) {
    copy_row_out(source, 0, source.numel(), hf);
    return;
  }
  const std::int64_t columns = source.numel() / source.size(0);
  for (std::size_t r = 0; r < rows.size(); ++r)
    copy_row_out(source, rows[r], columns, hf + static_cast<std::int64_t>(r) * columns);
}

void HfTensor::write_hf_order(const float* hf, const Tensor& destination) const {
  if (rows.empty()) {
    copy_row_in(hf, destination, 0, destination.numel());
    return;
  }
  const std::int64_t columns = destination.numel() / destination.size(0);
  for (std::size_t r = 0; r < rows.size(); ++r)
    copy_row_in(hf + static_cast<std::int64_t>(r) * columns, destination, rows[r], columns);
}

void validate_qwen3_moe_architecture(const config::ModelArchitecture& a) {
  if (a.model_type != "qwen3_moe" && !a.is_hybrid())
    core::throw_config_error("model.model_type",
                             "'" + a.model_type +
                                 "' is not supported by this model; expected qwen3_moe, "
                                 "qwen3_next, qwen3_5_moe or qwen3_5_moe_text");
  const auto positive = [](std::int64_t value, const char* field) {
    if (value <= 0)
      core::throw_config_error(std::string("model.") + field,
                               std::to_string(value) + ": must be > 0");
  };
  positive(a.vocab_size, "vocab_size");
  positive(a.hidden_size, "hidden_size");
  positive(a.num_hidden_layers, "num_hidden_layers");
  bool any_attention = false, any_linear = false;
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i)
    (a.mixer_of_layer(i) == config::LayerMixer::full_attention ? any_attention : any_linear) = true;
  if (any_attention) {
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
    if (a.rotary_dim() < 2)
      core::throw_config_error("model.partial_rotary_factor",
                               std::to_string(a.partial_rotary_factor) +
                                   ": rotates fewer than 2 of head_dim " +
                                   std::to_string(a.head_dim) + " dims");
  }
  if (any_linear) {
    positive(a.linear_num_key_heads, "linear_num_key_heads");
    positive(a.linear_num_value_heads, "linear_num_value_heads");
    positive(a.linear_key_head_dim, "linear_key_head_dim");
    positive(a.linear_value_head_dim, "linear_value_head_dim");
    positive(a.linear_conv_kernel_dim, "linear_conv_kernel_dim");
    if (a.linear_num_value_heads % a.linear_num_key_heads != 0)
      core::throw_config_error("model.linear_num_value_heads",
                               std::to_string(a.linear_num_value_heads) +
                                   ": must be a multiple of linear_num_key_heads (" +
                                   std::to_string(a.linear_num_key_heads) + ")");
  }
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
    if (a.is_hybrid())
      positive(a.shared_expert_intermediate_size, "shared_expert_intermediate_size");
  }
  if (any_dense) positive(a.intermediate_size, "intermediate_size");
}

Qwen3MoeParameters::Qwen3MoeParameters(const config::ModelArchitecture& architecture,
                                       ExpertRange experts, core::DType dtype, core::Device device,
                                       ModelPart part)
    : architecture_(architecture), expert_range_(experts), part_(std::move(part)) {
  if (dtype != DType::f32 && dtype != DType::f64)
    core::throw_config_error("model.dtype", "parameters are f32 or f64");
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
  layer_ids_ = held_layer_ids(a, part_);
  part_.layers.clear();
  for (const std::int64_t i : layer_ids_) {
    if (!part_.layers.empty() && part_.layers.back().first + part_.layers.back().count == i)
      ++part_.layers.back().count;
    else
      part_.layers.push_back({i, 1});
  }
  if (layer_ids_.empty()) part_.layers.push_back({0, 0});  // no layer (not "every layer")
  Layout layout = plan_layout(a, expert_range_, {embed_tokens, layers, final_norm, lm_head},
                              layer_ids_, part_.embedding, part_.head);
  dense_numel_ = layout.dense_total;
  const std::int64_t local_experts = expert_range_.count;
  const std::int64_t h = a.hidden_size, d = a.head_dim, hq = a.num_attention_heads,
                     moe_i = a.moe_intermediate_size, dense_i = a.intermediate_size;
  const bool hybrid = a.is_hybrid();
  const std::int64_t value_dim = a.linear_num_value_heads * a.linear_value_head_dim,
                     conv_dim = 2 * a.linear_num_key_heads * a.linear_key_head_dim + value_dim,
                     hv = a.linear_num_value_heads, shared_i = a.shared_expert_intermediate_size;

  all_values_ = Tensor::zeros({layout.total}, dtype, device);
  all_grads_ = Tensor::zeros({layout.total}, dtype, device);
  for (const auto& entry : layout.entries) {
    const std::int64_t end = entry.offset + entry.shape.numel();
    entry.param->value = all_values_.slice(entry.offset, end).reshape(entry.shape);
    entry.param->grad = all_grads_.slice(entry.offset, end).reshape(entry.shape);
  }
  if (a.tie_word_embeddings && part_.head) lm_head = embed_tokens;

  // HF names (qwen-moe.md §4.2), in checkpoint order, each with its whole-model index.
  std::size_t whole_index = 0;
  const auto add_hf = [this, &whole_index](std::string name, const Param& param,
                                           bool is_expert = false) {
    hf_tensors_.push_back({std::move(name), param.value, param.grad, is_expert});
    whole_model_index_.push_back(whole_index++);
  };
  const auto rows_of = [](const Param& param, std::int64_t begin, std::int64_t end) {
    return Param{param.value.slice(begin, end), param.grad.slice(begin, end)};
  };
  const auto select = [](const Param& param, std::int64_t index) {
    return Param{param.value.select(index), param.grad.select(index)};
  };
  // Rows [0, rows) of the storage starting at `first` (adjacent parameters), as one tensor.
  const auto spanning = [](const Param& first, std::int64_t rows, std::int64_t columns) {
    const auto view = [&](const Tensor& t) {
      return Tensor::view_of(t.raw_data(), {rows, columns}, t.dtype(), t.device());
    };
    return Param{view(first.value), view(first.grad)};
  };
  const auto add_hf_rows = [this, &whole_index](std::string name, const Param& param,
                                                std::vector<std::int64_t> rows) {
    hf_tensors_.push_back({std::move(name), param.value, param.grad, false, std::move(rows)});
    whole_model_index_.push_back(whole_index++);
  };
  if (embed_tokens.value.defined()) add_hf("model.embed_tokens.weight", embed_tokens);
  // Each held layer's tensors start after every earlier layer's, held or not.
  std::vector<std::size_t> layer_start(static_cast<std::size_t>(a.num_hidden_layers) + 1, 1);
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i)
    layer_start[static_cast<std::size_t>(i) + 1] =
        layer_start[static_cast<std::size_t>(i)] + hf_tensors_of_layer(a, i);
  for (std::size_t position = 0; position < layers.size(); ++position) {
    const std::int64_t i = layer_ids_[position];
    whole_index = layer_start[static_cast<std::size_t>(i)];
    const auto& layer = layers[position];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    add_hf(prefix + "input_layernorm.weight", layer.input_norm);
    if (layer.mixer == config::LayerMixer::full_attention) {
      if (hybrid) {
        add_hf_rows(prefix + "self_attn.q_proj.weight",
                    spanning(layer.attention.q_proj, 2 * hq * d, h), gated_query_rows(hq, d));
      } else {
        add_hf(prefix + "self_attn.q_proj.weight", layer.attention.q_proj);
      }
      add_hf(prefix + "self_attn.k_proj.weight", layer.attention.k_proj);
      add_hf(prefix + "self_attn.v_proj.weight", layer.attention.v_proj);
      add_hf(prefix + "self_attn.o_proj.weight", layer.attention.o_proj);
      add_hf(prefix + "self_attn.q_norm.weight", layer.attention.q_norm);
      add_hf(prefix + "self_attn.k_norm.weight", layer.attention.k_norm);
    } else {
      const auto& gdn = layer.linear_attention;
      const std::string linear = prefix + "linear_attn.";
      if (a.model_type == "qwen3_next") {
        add_hf_rows(linear + "in_proj_qkvz.weight",
                    spanning(gdn.in_proj_qkv, conv_dim + value_dim, h), next_qkvz_rows(a));
        add_hf_rows(linear + "in_proj_ba.weight", spanning(gdn.in_proj_b, 2 * hv, h),
                    next_ba_rows(a));
      } else {
        add_hf(linear + "in_proj_qkv.weight", gdn.in_proj_qkv);
        add_hf(linear + "in_proj_z.weight", gdn.in_proj_z);
        add_hf(linear + "in_proj_b.weight", gdn.in_proj_b);
        add_hf(linear + "in_proj_a.weight", gdn.in_proj_a);
      }
      add_hf(linear + "conv1d.weight", gdn.conv1d);
      add_hf(linear + "A_log", gdn.A_log);
      add_hf(linear + "dt_bias", gdn.dt_bias);
      add_hf(linear + "norm.weight", gdn.norm);
      add_hf(linear + "out_proj.weight", gdn.out_proj);
    }
    add_hf(prefix + "post_attention_layernorm.weight", layer.post_attention_norm);
    if (layer.is_moe) {
      add_hf(prefix + "mlp.gate.weight", layer.moe.router);
      if (layer.moe.has_shared_expert) {
        const auto& shared = layer.moe.shared_expert;
        add_hf(prefix + "mlp.shared_expert.gate_proj.weight", rows_of(shared.gate_up, 0, shared_i));
        add_hf(prefix + "mlp.shared_expert.up_proj.weight",
               rows_of(shared.gate_up, shared_i, 2 * shared_i));
        add_hf(prefix + "mlp.shared_expert.down_proj.weight", shared.down);
        add_hf(prefix + "mlp.shared_expert_gate.weight", layer.moe.shared_expert_gate);
      }
      whole_index += 3 * static_cast<std::size_t>(expert_range_.first);
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
  whole_index = layer_start.back();
  if (part_.head) {
    add_hf("model.norm.weight", final_norm);
    if (!a.tie_word_embeddings) add_hf("lm_head.weight", lm_head);
  }
  // A tied copy draws the embedding's values.
  if (holds_tied_head_copy()) whole_model_index_.front() = 0;
}

std::int64_t Qwen3MoeParameters::position_of_layer(std::int64_t layer) const {
  const auto at = std::lower_bound(layer_ids_.begin(), layer_ids_.end(), layer);
  return at != layer_ids_.end() && *at == layer ? at - layer_ids_.begin() : -1;
}

std::int64_t Qwen3MoeParameters::count(const config::ModelArchitecture& architecture,
                                       ExpertRange experts, std::int64_t* dense) {
  config::ModelArchitecture a = architecture;
  a.resolve();
  if (experts.count == 0) experts.count = a.num_experts;
  Param embed_tokens, final_norm, lm_head;
  std::vector<DecoderLayerParams> layers;
  const Layout layout =
      plan_layout(a, experts, {embed_tokens, layers, final_norm, lm_head}, held_layer_ids(a, {}));
  if (dense != nullptr) *dense = layout.dense_total;
  return layout.total;
}

std::int64_t Qwen3MoeParameters::count_stage(const config::ModelArchitecture& architecture,
                                             ExpertRange experts, const StageParts& parts,
                                             std::int64_t* experts_out) {
  config::ModelArchitecture a = architecture;
  a.resolve();
  if (experts.count == 0) experts.count = a.num_experts;
  Param embed_tokens, final_norm, lm_head;
  std::vector<DecoderLayerParams> layers;
  const Layout layout =
      plan_layout(a, experts, {embed_tokens, layers, final_norm, lm_head}, held_layer_ids(a, {}));
  const auto* layer_begin = reinterpret_cast<const char*>(layers.data());
  const auto* layer_end = reinterpret_cast<const char*>(layers.data() + layers.size());
  std::int64_t total = 0, routed = 0;
  for (const Layout::Entry& entry : layout.entries) {
    const auto* where = reinterpret_cast<const char*>(entry.param);
    bool held = false;
    if (entry.param == &embed_tokens) {
      held = parts.embedding || (parts.head && a.tie_word_embeddings);
    } else if (entry.param == &final_norm || entry.param == &lm_head) {
      held = parts.head;
    } else if (where >= layer_begin && where < layer_end) {
      const auto layer = static_cast<std::int64_t>((where - layer_begin) /
                                                   static_cast<std::ptrdiff_t>(sizeof(layers[0])));
      held = layer >= parts.first_layer && layer < parts.first_layer + parts.num_layers;
    }
    if (!held) continue;
    total += entry.shape.numel();
    if (entry.offset >= layout.dense_total) routed += entry.shape.numel();
  }
  if (experts_out != nullptr) *experts_out = routed;
  return total;
}

const HfTensor* Qwen3MoeParameters::find(const std::string& hf_name) const {
  for (const auto& tensor : hf_tensors_)
    if (tensor.name == hf_name) return &tensor;
  return nullptr;
}

void Qwen3MoeParameters::copy_values_from(const Qwen3MoeParameters& other) const {
  if (other.all_values_.shape() != all_values_.shape() ||
      other.all_values_.dtype() != all_values_.dtype() ||
      other.expert_range_.first != expert_range_.first ||
      other.expert_range_.count != expert_range_.count || other.layer_ids_ != layer_ids_ ||
      other.part_.embedding != part_.embedding || other.part_.head != part_.head)
    core::throw_runtime_error("Qwen3MoeParameters::copy_values_from: the models differ (" +
                              other.all_values_.describe() + " into " + all_values_.describe() +
                              ")");
  all_values_.copy_from(other.all_values_);
}

void Qwen3MoeParameters::init_random(std::uint64_t seed, double init_std) const {
  if (device() != core::Device::cpu) {
    // The random streams are host code: draw on a host copy and upload it once.
    const Qwen3MoeParameters host(architecture_, expert_range_, all_values_.dtype(),
                                  core::Device::cpu, part_);
    host.init_random(seed, init_std);
    copy_values_from(host);
    return;
  }
  // Each tensor's random stream is keyed on its index in the whole model's list, so a rank
  // holding an expert slice or a stage's layers draws exactly the values the whole model has
  // there (a MoE layer's experts close its block, 3 tensors each: gate, up, down).
  std::vector<float> values;
  for (std::size_t i = 0; i < hf_tensors_.size(); ++i) {
    const HfTensor& tensor = hf_tensors_[i];
    values.resize(static_cast<std::size_t>(tensor.value.numel()));
    fill_initial_values(tensor.name, whole_model_index_[i], seed, init_std, values);
    tensor.write_hf_order(values.data(), tensor.value);
  }
}

void Qwen3MoeParameters::fill_initial_values(const std::string& name, std::size_t index,
                                             std::uint64_t seed, double init_std,
                                             std::vector<float>& values) const {
  const auto uniform_bits = [&](std::size_t j) {
    return core::random_bits(seed, core::RngPurpose::weight_init, index,
                             static_cast<std::uint64_t>(j));
  };
  if (is_norm_weight(name)) {
    // Zero-centred norms ((1 + w), hybrid family) are the identity at 0; the DeltaNet's gated
    // output norm is plain (identity 1) in every family.
    const bool zero_centred =
        architecture_.is_hybrid() && !name.ends_with("linear_attn.norm.weight");
    std::fill(values.begin(), values.end(), zero_centred ? 0.0f : 1.0f);
    return;
  }
  if (name.ends_with("linear_attn.dt_bias")) {
    std::fill(values.begin(), values.end(), 1.0f);
    return;
  }
  if (name.ends_with("linear_attn.A_log")) {
    // log U(1, 16): per-head decay rates spread over an order of magnitude, as HF initialises.
    for (std::size_t j = 0; j < values.size(); ++j)
      values[j] = static_cast<float>(
          std::log(1.0 + 15.0 * static_cast<double>(uniform_bits(j) >> 40) * 0x1.0p-24));
    return;
  }
  // Box-Muller on two counter-based uniforms per element: independent of thread count and of
  // how tensors are laid out in memory.
  for (std::size_t j = 0; j < values.size(); ++j) {
    const auto bits = uniform_bits(j);
    const double u1 = (static_cast<double>(bits >> 40) + 1.0) * 0x1.0p-24;
    const double u2 = static_cast<double>(bits & 0xffffffu) * 0x1.0p-24;
    values[j] =
        static_cast<float>(init_std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
}

}  // namespace dyncp::model
