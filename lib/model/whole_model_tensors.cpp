#include "model/whole_model_tensors.hpp"

#include <algorithm>
#include <exception>
#include <string_view>
#include <unordered_map>

#include "core/error.hpp"

namespace dyncp::model {

namespace {

// Elements from the start of parameters.all_values() to `value`.
std::int64_t element_offset(const Qwen3MoeParameters& parameters, const Tensor& value) {
  const auto bytes = static_cast<const std::byte*>(value.raw_data()) -
                     static_cast<const std::byte*>(parameters.all_values().raw_data());
  return static_cast<std::int64_t>(bytes) /
         static_cast<std::int64_t>(core::dtype_size(parameters.all_values().dtype()));
}

// `value`'s counterpart in `flat` (same offset and shape, flat's dtype).
Tensor counterpart(const Qwen3MoeParameters& parameters, const Tensor& flat, const Tensor& value) {
  const std::int64_t offset = element_offset(parameters, value);
  auto* base = static_cast<std::byte*>(flat.raw_data()) +
               offset * static_cast<std::int64_t>(core::dtype_size(flat.dtype()));
  return Tensor::view_of(base, value.shape(), flat.dtype());
}

bool holds_every_expert(const Qwen3MoeParameters& parameters) {
  return parameters.expert_range().count == parameters.architecture().num_experts;
}

}  // namespace

WholeExpertLayer::WholeExpertLayer(const Qwen3MoeParameters& parameters, Tensor flat,
                                   ExpertGather* gather)
    : WholeExpertLayer(parameters, std::move(flat), WholeModelGathers{nullptr, nullptr, gather},
                       /*whole=*/true) {}

WholeExpertLayer::WholeExpertLayer(const Qwen3MoeParameters& parameters, Tensor flat,
                                   const WholeModelGathers& gathers, bool whole)
    : parameters_(parameters),
      flat_(std::move(flat)),
      gathers_(gathers),
      complete_((holds_every_expert(parameters) || gathers.expert_parallel != nullptr) &&
                (parameters.tensor_parallel().expert_size == 1 ||
                 gathers.expert_tensor_parallel != nullptr)) {
  DYNCP_CHECK(flat_.numel() == parameters.all_values().numel(),
              "the buffer is laid out like the parameters");
  if (whole && gathers_.expert_parallel == nullptr && !holds_every_expert(parameters)) {
    const auto& range = parameters.expert_range();
    core::throw_runtime_error(
        "writing every expert from a rank that holds experts [" + std::to_string(range.first) +
        ", " + std::to_string(range.first + range.count) +
        ") needs the other ranks' slices: pass the expert-parallel group's gather");
  }
  if (parameters.tensor_parallel().expert_size == 1) return;
  if (whole && gathers_.expert_tensor_parallel == nullptr) {
    core::throw_runtime_error(
        "writing whole experts from a rank that holds 1/" +
        std::to_string(parameters.tensor_parallel().expert_size) +
        " of each (expert_tensor_parallel_size) needs the other pieces: pass the expert "
        "tensor-parallel group's sum");
  }
  // "model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight" by layer and local expert.
  expert_tensors_.resize(static_cast<std::size_t>(parameters.architecture().num_hidden_layers));
  const std::string layers = "model.layers.", experts = ".mlp.experts.";
  for (const HfTensor& tensor : parameters.hf_tensors()) {
    if (!tensor.is_expert) continue;
    const auto layer = static_cast<std::size_t>(std::stoll(tensor.name.substr(layers.size())));
    const std::int64_t expert =
        std::stoll(tensor.name.substr(tensor.name.find(experts) + experts.size())) -
        parameters.expert_range().first;
    auto& held = expert_tensors_[layer];
    if (held.size() <= static_cast<std::size_t>(expert))
      held.resize(static_cast<std::size_t>(expert) + 1, {nullptr, nullptr, nullptr});
    const int part = tensor.name.ends_with(".gate_proj.weight") ? 0
                     : tensor.name.ends_with(".up_proj.weight") ? 1
                                                                : 2;
    held[static_cast<std::size_t>(expert)][static_cast<std::size_t>(part)] = &tensor;
  }
}

std::span<const float> WholeExpertLayer::held_experts(std::int64_t layer, int part) {
  const std::int64_t position = parameters_.position_of_layer(layer);
  const auto& experts = parameters_.layers.at(static_cast<std::size_t>(position)).moe.experts;
  const Tensor held =
      counterpart(parameters_, flat_, part == 0 ? experts.gate_up.value : experts.down.value);
  auto& buffer = pieces_[part];
  if (parameters_.tensor_parallel().expert_size > 1) {
    // Per expert [gate (I x h) | up (I x h)] or down (h x I), every column, in HF order.
    const auto& a = parameters_.architecture();
    const std::int64_t per_expert = (part == 0 ? 2 : 1) * a.moe_intermediate_size * a.hidden_size;
    const auto& local = expert_tensors_.at(static_cast<std::size_t>(layer));
    buffer.assign(local.size() * static_cast<std::size_t>(per_expert), -0.0f);
    for (std::size_t e = 0; e < local.size(); ++e) {
      float* out = buffer.data() + static_cast<std::int64_t>(e) * per_expert;
      for (const int which : part == 0 ? std::vector<int>{0, 1} : std::vector<int>{2}) {
        const HfTensor* tensor = local[e][static_cast<std::size_t>(which)];
        DYNCP_CHECK(tensor != nullptr, "every local expert has its gate, up and down");
        tensor->read_hf_order(counterpart(parameters_, flat_, tensor->value), out);
        out += tensor->hf_numel();
      }
    }
    if (gathers_.expert_tensor_parallel != nullptr) gathers_.expert_tensor_parallel->sum(buffer);
    return buffer;
  }
  if (held.dtype() == core::DType::f32)
    return {held.data<float>(), static_cast<std::size_t>(held.numel())};
  buffer.resize(static_cast<std::size_t>(held.numel()));
  const double* from = held.data<double>();
  std::transform(from, from + held.numel(), buffer.begin(),
                 [](double x) { return static_cast<float>(x); });
  return buffer;
}

std::span<const float> WholeExpertLayer::part(std::int64_t layer, int part) {
  DYNCP_CHECK(part == 0 || part == 1, "expert part is gate_up (0) or down (1)");
  if (layer != layer_) {
    const std::int64_t position = parameters_.position_of_layer(layer);
    DYNCP_CHECK(position >= 0 && parameters_.layers[static_cast<std::size_t>(position)].is_moe,
                "this part holds layer " + std::to_string(layer) + " and its experts");
    for (int k = 0; k < 2; ++k) {
      const std::span<const float> held = held_experts(layer, k);
      if (holds_every_expert(parameters_) || gathers_.expert_parallel == nullptr) {
        views_[k] = held;  // every expert, or a helping rank's part that nobody reads
        continue;
      }
      auto& buffer = parts_[k];
      buffer.resize(held.size() / static_cast<std::size_t>(parameters_.expert_range().count) *
                    static_cast<std::size_t>(parameters_.architecture().num_experts));
      gathers_.expert_parallel->gather(held, buffer);
      views_[k] = buffer;
    }
    layer_ = layer;
  }
  return views_[part];
}

namespace {

// The tensors of whole-model layer i, in the order Qwen3MoeParameters lists them (every expert).
void add_layer_tensors(const config::ModelArchitecture& a, std::int64_t i,
                       std::vector<WholeModelTensor>& tensors) {
  const std::int64_t h = a.hidden_size, d = a.head_dim, hq = a.num_attention_heads,
                     hkv = a.num_key_value_heads;
  const std::string prefix = "model.layers." + std::to_string(i) + ".";
  const auto add = [&](std::string name, std::vector<std::int64_t> shape, bool reordered = false) {
    tensors.push_back({prefix + std::move(name), std::move(shape), nullptr, -1, -1, 0, reordered});
  };
  add("input_layernorm.weight", {h});
  if (a.mixer_of_layer(i) == config::LayerMixer::full_attention) {
    // The hybrid's gated q_proj holds the query and gate rows of each head interleaved.
    add("self_attn.q_proj.weight", {(a.is_hybrid() ? 2 : 1) * hq * d, h}, a.is_hybrid());
    add("self_attn.k_proj.weight", {hkv * d, h});
    add("self_attn.v_proj.weight", {hkv * d, h});
    add("self_attn.o_proj.weight", {h, hq * d});
    add("self_attn.q_norm.weight", {d});
    add("self_attn.k_norm.weight", {d});
  } else {
    const std::int64_t key_dim = a.linear_num_key_heads * a.linear_key_head_dim,
                       value_dim = a.linear_num_value_heads * a.linear_value_head_dim,
                       conv_dim = 2 * key_dim + value_dim, hv = a.linear_num_value_heads;
    if (a.model_type == "qwen3_next") {
      add("linear_attn.in_proj_qkvz.weight", {conv_dim + value_dim, h}, true);
      add("linear_attn.in_proj_ba.weight", {2 * hv, h}, true);
    } else {
      add("linear_attn.in_proj_qkv.weight", {conv_dim, h});
      add("linear_attn.in_proj_z.weight", {value_dim, h});
      add("linear_attn.in_proj_b.weight", {hv, h});
      add("linear_attn.in_proj_a.weight", {hv, h});
    }
    add("linear_attn.conv1d.weight", {conv_dim, 1, a.linear_conv_kernel_dim});
    add("linear_attn.A_log", {hv});
    add("linear_attn.dt_bias", {hv});
    add("linear_attn.norm.weight", {a.linear_value_head_dim});
    add("linear_attn.out_proj.weight", {h, value_dim});
  }
  add("post_attention_layernorm.weight", {h});
  if (!a.is_moe_layer(i)) {
    const std::int64_t dense = a.intermediate_size;
    add("mlp.gate_proj.weight", {dense, h});
    add("mlp.up_proj.weight", {dense, h});
    add("mlp.down_proj.weight", {h, dense});
    return;
  }
  add("mlp.gate.weight", {a.num_experts, h});
  if (a.is_hybrid()) {
    const std::int64_t shared = a.shared_expert_intermediate_size;
    add("mlp.shared_expert.gate_proj.weight", {shared, h});
    add("mlp.shared_expert.up_proj.weight", {shared, h});
    add("mlp.shared_expert.down_proj.weight", {h, shared});
    add("mlp.shared_expert_gate.weight", {1, h});
  }
  const std::int64_t intermediate = a.moe_intermediate_size;
  for (std::int64_t e = 0; e < a.num_experts; ++e) {
    const std::string expert = prefix + "mlp.experts." + std::to_string(e) + ".";
    tensors.push_back({expert + "gate_proj.weight", {intermediate, h}, nullptr, i, e, 0});
    tensors.push_back({expert + "up_proj.weight", {intermediate, h}, nullptr, i, e, 1});
    tensors.push_back({expert + "down_proj.weight", {h, intermediate}, nullptr, i, e, 2});
  }
}

}  // namespace

std::vector<WholeModelTensor> whole_model_tensors(const Qwen3MoeParameters& parameters) {
  const config::ModelArchitecture& a = parameters.architecture();
  std::vector<WholeModelTensor> tensors;
  tensors.push_back({"model.embed_tokens.weight", {a.vocab_size, a.hidden_size}});
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i) add_layer_tensors(a, i, tensors);
  tensors.push_back({"model.norm.weight", {a.hidden_size}});
  if (!a.tie_word_embeddings) tensors.push_back({"lm_head.weight", {a.vocab_size, a.hidden_size}});
  std::unordered_map<std::string_view, const HfTensor*> held;
  for (const HfTensor& tensor : parameters.hf_tensors()) held.emplace(tensor.name, &tensor);
  for (WholeModelTensor& tensor : tensors) {
    if (tensor.layer >= 0) continue;
    const auto found = held.find(tensor.name);
    if (found != held.end()) tensor.held = found->second;
  }
  return tensors;
}

bool holds(const Qwen3MoeParameters& parameters, const WholeModelTensor& tensor) {
  if (tensor.layer < 0) return tensor.held != nullptr;
  return parameters.position_of_layer(tensor.layer) >= 0 &&
         parameters.expert_range().holds(tensor.expert, parameters.architecture().num_experts);
}

TensorToWrite tensor_to_write(const WholeModelTensor& tensor, std::string stored_name,
                              const Qwen3MoeParameters& parameters, const Tensor& flat,
                              WholeExpertLayer& experts, PieceSum* tensor_parallel) {
  TensorToWrite entry{std::move(stored_name), tensor.shape, {}, {}};
  if (!stage_holds(parameters, tensor)) return entry;  // another stage's: routed to it
  if (tensor.held != nullptr) {
    const HfTensor* held = tensor.held;
    const Tensor source = counterpart(parameters, flat, held->value);
    if (!held->holds_whole()) {
      if (tensor_parallel == nullptr)
        core::throw_runtime_error("writing the whole '" + held->name +
                                  "' from a tensor-parallel rank's piece of it needs the other "
                                  "pieces: pass the tensor-parallel group's sum");
      entry.fill = [held, source, tensor_parallel](std::span<float> out) {
        std::fill(out.begin(), out.end(), -0.0f);
        held->read_hf_order(source, out.data());
        tensor_parallel->sum(out);
      };
    } else if (held->stored_in_hf_order() && source.dtype() == core::DType::f32) {
      entry.values = {source.data<float>(), static_cast<std::size_t>(source.numel())};
    } else {
      entry.fill = [held, source](std::span<float> out) {
        held->read_hf_order(source, out.data());
      };
    }
    return entry;
  }
  // Expert e's gate and up rows are [e 2I h, e 2I h + I h) and [.. + I h, .. + 2 I h) of the
  // layer's gate_up; its down is [e h I, (e + 1) h I) of down.
  const std::int64_t count = entry.numel();
  const std::int64_t begin =
      tensor.part == 2 ? tensor.expert * count : (2 * tensor.expert + tensor.part) * count;
  entry.fill = [&experts, layer = tensor.layer, fused = tensor.part == 2 ? 1 : 0, begin,
                count](std::span<float> out) {
    const std::span<const float> whole = experts.part(layer, fused);
    if (!experts.complete()) return;  // a helping rank: its gathers ran, nothing to read
    std::copy_n(whole.begin() + begin, count, out.begin());
  };
  return entry;
}

bool takes_part(const WholeModelTensor& tensor, const WholeModelGathers& gathers) {
  return tensor.layer >= 0 ? gathers.experts : gathers.dense;
}

bool stage_holds(const Qwen3MoeParameters& parameters, const WholeModelTensor& tensor) {
  return tensor.layer >= 0 ? parameters.position_of_layer(tensor.layer) >= 0
                           : tensor.held != nullptr;
}

void route_through_stages(std::vector<TensorToWrite>& entries,
                          const std::vector<const WholeModelTensor*>& sources,
                          const Qwen3MoeParameters& parameters, StageTensorRelay& relay) {
  DYNCP_CHECK(entries.size() == sources.size(), "one source tensor per entry");
  const StageTensorRelay::Role role = relay.role();
  if (role == StageTensorRelay::Role::writer_gathers) return;  // the writer's own stage
  for (std::size_t i = 0; i < entries.size(); ++i) {
    TensorToWrite& entry = entries[i];
    const WholeModelTensor& source = *sources[i];
    const bool held = stage_holds(parameters, source);
    if (role == StageTensorRelay::Role::writer) {
      if (held) continue;
      entry.values = {};
      entry.fill = [&relay, &source](std::span<float> out) { relay.receive(source, out); };
      continue;
    }
    const bool sent = held && !relay.writer_holds(source);
    if (role == StageTensorRelay::Role::relay_gathers) {
      // Only the gathers and sums of what the relay sends are collective (a helping rank has
      // fills only for the groups it shares with the relay).
      if (!sent) entry.fill = {};
      entry.values = {};
      continue;
    }
    if (!sent) {
      entry.values = {};
      entry.fill = {};
      continue;
    }
    entry.fill = [&relay, &source, values = entry.values,
                  inner = std::move(entry.fill)](std::span<float> out) {
      if (inner)
        inner(out);
      else
        std::copy(values.begin(), values.end(), out.begin());
      relay.send(source, out);
    };
    entry.values = {};
  }
}

void write_collectively(std::vector<TensorToWrite>& tensors, bool writer,
                        const std::function<void(std::span<const TensorToWrite>)>& write) {
  std::size_t next = 0;  // the first fill that has not run
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].fill) continue;
    tensors[i].fill = [inner = std::move(tensors[i].fill), i, &next](std::span<float> out) {
      inner(out);
      next = i + 1;
    };
  }
  const auto run_rest = [&] {
    std::vector<float> scratch;
    for (std::size_t i = next; i < tensors.size(); ++i) {
      if (!tensors[i].fill) continue;
      scratch.resize(static_cast<std::size_t>(tensors[i].numel()));
      tensors[i].fill(scratch);
    }
  };
  if (!writer) {
    run_rest();
    return;
  }
  try {
    write(tensors);
  } catch (...) {
    run_rest();
    throw;
  }
}

}  // namespace dyncp::model
