#include "model/whole_model_tensors.hpp"

#include <algorithm>
#include <exception>

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
    : parameters_(parameters), flat_(std::move(flat)), gather_(gather) {
  DYNCP_CHECK(flat_.numel() == parameters.all_values().numel(),
              "the buffer is laid out like the parameters");
  if (gather_ == nullptr && !holds_every_expert(parameters)) {
    const auto& range = parameters.expert_range();
    core::throw_runtime_error(
        "writing every expert from a rank that holds experts [" + std::to_string(range.first) +
        ", " + std::to_string(range.first + range.count) +
        ") needs the other ranks' slices: pass the expert-parallel group's gather");
  }
}

std::span<const float> WholeExpertLayer::part(std::int64_t layer, int part) {
  DYNCP_CHECK(part == 0 || part == 1, "expert part is gate_up (0) or down (1)");
  if (layer != layer_) {
    const auto& experts = parameters_.layers.at(static_cast<std::size_t>(layer)).moe.experts;
    DYNCP_CHECK(parameters_.layers[static_cast<std::size_t>(layer)].is_moe,
                "layer " + std::to_string(layer) + " has experts");
    for (int k = 0; k < 2; ++k) {
      const Tensor held =
          counterpart(parameters_, flat_, k == 0 ? experts.gate_up.value : experts.down.value);
      auto& buffer = parts_[k];
      if (holds_every_expert(parameters_)) {
        if (held.dtype() == core::DType::f32) {
          views_[k] = {held.data<float>(), static_cast<std::size_t>(held.numel())};
          continue;
        }
        buffer.resize(static_cast<std::size_t>(held.numel()));
        const double* from = held.data<double>();
        std::transform(from, from + held.numel(), buffer.begin(),
                       [](double x) { return static_cast<float>(x); });
      } else {
        const std::int64_t whole = held.numel() / parameters_.expert_range().count *
                                   parameters_.architecture().num_experts;
        buffer.resize(static_cast<std::size_t>(whole));
        gather_->gather({held.data<float>(), static_cast<std::size_t>(held.numel())}, buffer);
      }
      views_[k] = buffer;
    }
    layer_ = layer;
  }
  return views_[part];
}

std::vector<WholeModelTensor> whole_model_tensors(const Qwen3MoeParameters& parameters) {
  const std::int64_t num_experts = parameters.architecture().num_experts;
  std::vector<WholeModelTensor> tensors;
  std::int64_t layer = -1;  // the MoE layer whose experts were listed last
  for (const HfTensor& tensor : parameters.hf_tensors()) {
    if (!tensor.is_expert) {
      tensors.push_back({tensor.name, tensor.hf_shape, &tensor});
      continue;
    }
    // "model.layers.{i}.mlp.experts.{e}.<part>.weight": the first expert tensor of a layer
    // stands for every expert of it.
    const std::string layers = "model.layers.";
    const std::int64_t this_layer = std::stoll(tensor.name.substr(layers.size()));
    if (this_layer == layer) continue;
    layer = this_layer;
    const std::string prefix = tensor.name.substr(0, tensor.name.find(".experts.") + 9);
    const std::int64_t intermediate = parameters.architecture().moe_intermediate_size,
                       hidden = parameters.architecture().hidden_size;
    for (std::int64_t e = 0; e < num_experts; ++e) {
      const std::string expert = prefix + std::to_string(e) + ".";
      tensors.push_back(
          {expert + "gate_proj.weight", {intermediate, hidden}, nullptr, layer, e, 0});
      tensors.push_back({expert + "up_proj.weight", {intermediate, hidden}, nullptr, layer, e, 1});
      tensors.push_back(
          {expert + "down_proj.weight", {hidden, intermediate}, nullptr, layer, e, 2});
    }
  }
  return tensors;
}

TensorToWrite tensor_to_write(const WholeModelTensor& tensor, std::string stored_name,
                              const Qwen3MoeParameters& parameters, const Tensor& flat,
                              WholeExpertLayer& experts) {
  TensorToWrite entry{std::move(stored_name), tensor.shape, {}, {}};
  if (tensor.held != nullptr) {
    const HfTensor* held = tensor.held;
    const Tensor source = counterpart(parameters, flat, held->value);
    if (held->stored_in_hf_order() && source.dtype() == core::DType::f32) {
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
    std::copy_n(whole.begin() + begin, count, out.begin());
  };
  return entry;
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
