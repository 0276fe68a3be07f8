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

// Where every parameter lives in the flat buffers, for the sizes a rank computes with (its
// local architecture, tensor_parallel.hpp), the experts it holds and the layers (embedding,
// head) of its part: the one plan behind both the allocation and count(), so the memory
// estimate counts exactly what is allocated.
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

std::int64_t HfTensor::hf_numel() const {
  std::int64_t n = 1;
  for (const std::int64_t extent : hf_shape) n *= extent;
  return n;
}

bool HfTensor::stored_in_hf_order() const {
  if (!holds_whole() || hf_column_first != 0) return false;
  for (const HfRowRun& run : row_runs)
    if (run.row != run.hf_row) return false;
  return true;
}

void HfTensor::read_hf_order(const Tensor& source, float* hf) const {
  const std::int64_t columns = source.numel() / std::max<std::int64_t>(source.size(0), 1);
  const std::int64_t hf_columns = hf_numel() / std::max<std::int64_t>(hf_shape.at(0), 1);
  const Tensor rows = source.reshape({source.size(0), columns});
  for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
    for (std::int64_t r = 0; r < count; ++r)
      copy_row_out(rows, row + r, columns, hf + (hf_row + r) * hf_columns + hf_column_first);
  });
}

void HfTensor::write_hf_order(const float* hf, const Tensor& destination) const {
  const std::int64_t columns = destination.numel() / std::max<std::int64_t>(destination.size(0), 1);
  const std::int64_t hf_columns = hf_numel() / std::max<std::int64_t>(hf_shape.at(0), 1);
  const Tensor rows = destination.reshape({destination.size(0), columns});
  for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
    for (std::int64_t r = 0; r < count; ++r)
      copy_row_in(hf + (hf_row + r) * hf_columns + hf_column_first, rows, row + r, columns);
  });
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
                                       TensorParallelShape tensor_parallel, ModelPart part)
    : architecture_(architecture),
      tensor_parallel_(tensor_parallel),
      expert_range_(experts),
      part_(std::move(part)) {
  if (dtype != DType::f32 && dtype != DType::f64)
    core::throw_config_error("model.dtype", "parameters are f32 or f64");
  architecture_.resolve();
  validate_qwen3_moe_architecture(architecture_);
  local_architecture_ = model::local_architecture(architecture_, tensor_parallel_);
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
  Layout layout =
      plan_layout(local_architecture_, expert_range_, {embed_tokens, layers, final_norm, lm_head},
                  layer_ids_, part_.embedding, part_.head);
  dense_numel_ = layout.dense_total;
  all_values_ = Tensor::zeros({layout.total}, dtype, device);
  all_grads_ = Tensor::zeros({layout.total}, dtype, device);
  for (const auto& entry : layout.entries) {
    const std::int64_t end = entry.offset + entry.shape.numel();
    entry.param->value = all_values_.slice(entry.offset, end).reshape(entry.shape);
    entry.param->grad = all_grads_.slice(entry.offset, end).reshape(entry.shape);
  }
  if (a.tie_word_embeddings && part_.head) lm_head = embed_tokens;
  add_hf_tensors();
}

std::int64_t Qwen3MoeParameters::position_of_layer(std::int64_t layer) const {
  const auto at = std::lower_bound(layer_ids_.begin(), layer_ids_.end(), layer);
  return at != layer_ids_.end() && *at == layer ? at - layer_ids_.begin() : -1;
}

std::int64_t Qwen3MoeParameters::count(const config::ModelArchitecture& architecture,
                                       ExpertRange experts, std::int64_t* dense,
                                       TensorParallelShape tensor_parallel) {
  config::ModelArchitecture whole = architecture;
  whole.resolve();
  const config::ModelArchitecture a = model::local_architecture(whole, tensor_parallel);
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
      other.tensor_parallel_.size != tensor_parallel_.size ||
      other.tensor_parallel_.index != tensor_parallel_.index ||
      other.tensor_parallel_.expert_index != tensor_parallel_.expert_index ||
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
                                  core::Device::cpu, tensor_parallel_, part_);
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
    // Drawn for the whole tensor, so a TP piece holds the whole model's values there.
    values.resize(static_cast<std::size_t>(tensor.hf_numel()));
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
