#include "model/hf_checkpoint.hpp"

#include <filesystem>
#include <set>

#include "config/model_architecture.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"
#include "model/whole_model_tensors.hpp"

namespace dyncp::model {

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool belongs_to_other_model_parts(const std::string& name) {
  return name.starts_with("mtp.") || name.starts_with("model.visual.") ||
         name.starts_with("visual.");
}

// "model.layers.{i}.mlp.experts.{e}.*" → e, or -1 for any other name.
std::int64_t expert_index_of(const std::string& name) {
  const std::string marker = ".mlp.experts.";
  const auto at = name.find(marker);
  if (at == std::string::npos) return -1;
  std::int64_t expert = 0;
  std::size_t i = at + marker.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    expert = expert * 10 + (name[i] - '0');
  return expert;
}

// A tensor of the whole model that another pipeline stage holds: a layer outside this part,
// the embedding on a part without it (and without a tied head's copy), the final norm and
// head on a part without the head. `text_prefix`: "model." or Qwen3.5's
// "model.language_model.".
bool held_by_another_stage(const std::string& name, const std::string& text_prefix,
                           const Qwen3MoeParameters& parameters) {
  const ModelPart& part = parameters.part();
  const std::string layers = text_prefix + "layers.";
  if (name.starts_with(layers)) {
    std::size_t i = layers.size();
    std::int64_t layer = 0;
    if (i >= name.size() || name[i] < '0' || name[i] > '9') return false;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
      layer = layer * 10 + (name[i] - '0');
    return layer < parameters.architecture().num_hidden_layers &&
           parameters.position_of_layer(layer) < 0;
  }
  if (name == text_prefix + "embed_tokens.weight")
    return !part.embedding && !parameters.holds_tied_head_copy();
  if (name == text_prefix + "norm.weight" || name == "lm_head.weight") return !part.head;
  return false;
}

// How the text model's tensors are stored on disk (qwen-moe.md §4.3-4.4): under `model.` or,
// in Qwen3.5's multimodal checkpoints, `model.language_model.`; experts one tensor per expert
// or fused per layer (`mlp.experts.gate_up_proj` [E, 2I, h], `mlp.experts.down_proj` [E, h, I]).
struct DiskLayout {
  std::string text_prefix = "model.";
  bool fused_experts = false;
};

std::string disk_name(const DiskLayout& layout, const std::string& name) {
  return name.starts_with("model.") ? layout.text_prefix + name.substr(6) : name;
}

// A per-expert HF name split into its fused tensor's name and its place in it.
struct FusedExpertSlice {
  std::string fused_name;  // "<prefix>layers.{i}.mlp.experts.gate_up_proj" or "...down_proj"
  std::int64_t expert = -1;
  int part = 0;  // gate_up_proj: 0 = gate rows, 1 = up rows; down_proj: 0
};

FusedExpertSlice fused_slice_of(const DiskLayout& layout, const std::string& name) {
  const std::int64_t expert = expert_index_of(name);
  const std::string marker = ".mlp.experts.";
  const std::string layer_part = name.substr(0, name.find(marker) + marker.size());
  FusedExpertSlice slice;
  slice.expert = expert;
  if (name.ends_with(".down_proj.weight")) {
    slice.fused_name = disk_name(layout, layer_part + "down_proj");
  } else {
    slice.fused_name = disk_name(layout, layer_part + "gate_up_proj");
    slice.part = name.ends_with(".up_proj.weight") ? 1 : 0;
  }
  return slice;
}

DiskLayout detect_disk_layout(const SafetensorsCheckpoint& checkpoint) {
  DiskLayout layout;
  for (const auto& name : checkpoint.tensor_names()) {
    if (name.starts_with("model.language_model.")) layout.text_prefix = "model.language_model.";
    if (name.ends_with(".mlp.experts.gate_up_proj")) layout.fused_experts = true;
  }
  return layout;
}

// The layout an export writes: what transformers' own class for the model type saves.
DiskLayout export_layout(const config::ModelArchitecture& architecture) {
  DiskLayout layout;
  layout.fused_experts = export_fuses_experts(architecture);
  return layout;
}

void read_fused_expert(const SafetensorsCheckpoint& checkpoint, const std::string& folder,
                       const HfTensor& tensor, const FusedExpertSlice& slice,
                       std::int64_t num_experts, std::vector<float>& buffer) {
  const StoredTensorInfo* stored = checkpoint.find(slice.fused_name);
  if (stored == nullptr)
    core::throw_data_error(folder, "tensor '" + slice.fused_name +
                                       "' (fused experts, needed for '" + tensor.name +
                                       "') is missing from the checkpoint");
  // Per expert: gate_up [2I, h] (gate rows then up rows) or down [h, I]; the model's view of
  // one part has shape rows x columns.
  const std::int64_t rows = tensor.hf_shape.at(0), columns = tensor.hf_shape.at(1);
  const bool gate_up = slice.fused_name.ends_with("gate_up_proj");
  const std::vector<std::int64_t> expected =
      gate_up ? std::vector<std::int64_t>{num_experts, 2 * rows, columns}
              : std::vector<std::int64_t>{num_experts, rows, columns};
  if (stored->shape != expected)
    core::throw_data_error(checkpoint.file_of(slice.fused_name),
                           "fused expert tensor '" + slice.fused_name + "' has shape " +
                               shape_text(stored->shape) + " but the model needs " +
                               shape_text(expected) + " ([E, 2I, h] / [E, h, I])");
  const std::int64_t per_expert = (gate_up ? 2 : 1) * rows * columns;
  const std::int64_t first = slice.expert * per_expert + slice.part * rows * columns;
  buffer.resize(static_cast<std::size_t>(tensor.hf_numel()));
  checkpoint.read_f32_range(slice.fused_name, first, buffer);
  tensor.write_hf_order(buffer.data(), tensor.value);
}

}  // namespace

void load_hf_weights(const std::string& folder, const Qwen3MoeParameters& parameters) {
  const SafetensorsCheckpoint checkpoint(folder);
  const DiskLayout layout = detect_disk_layout(checkpoint);
  const auto& architecture = parameters.architecture();
  std::set<std::string> expected_names;
  std::vector<float> buffer;  // f32 in HF order; stored into the parameters' dtype and order
  for (const auto& tensor : parameters.hf_tensors()) {
    if (tensor.is_expert && layout.fused_experts) {
      const FusedExpertSlice slice = fused_slice_of(layout, tensor.name);
      expected_names.insert(slice.fused_name);
      read_fused_expert(checkpoint, folder, tensor, slice, architecture.num_experts, buffer);
      continue;
    }
    const std::string name = disk_name(layout, tensor.name);
    expected_names.insert(name);
    const StoredTensorInfo* stored = checkpoint.find(name);
    if (stored == nullptr)
      core::throw_data_error(folder, "tensor '" + name + "' (shape " + shape_text(tensor.hf_shape) +
                                         ") is missing from the checkpoint");
    if (stored->shape != tensor.hf_shape)
      core::throw_data_error(checkpoint.file_of(name), "tensor '" + name + "' has shape " +
                                                           shape_text(stored->shape) +
                                                           " but the model (config.json) needs " +
                                                           shape_text(tensor.hf_shape));
    // The whole tensor; a tensor-parallel rank keeps its piece.
    buffer.resize(static_cast<std::size_t>(tensor.hf_numel()));
    checkpoint.read_f32(name, buffer);
    tensor.write_hf_order(buffer.data(), tensor.value);
  }
  const bool tied = architecture.tie_word_embeddings;
  for (const auto& name : checkpoint.tensor_names()) {
    if (expected_names.count(name) != 0 || belongs_to_other_model_parts(name) ||
        held_by_another_stage(name, layout.text_prefix, parameters))
      continue;
    if (tied && name == "lm_head.weight") continue;
    // Experts held by other ranks of the expert-parallel group.
    const std::int64_t expert = expert_index_of(name);
    if (expert >= 0 && expert < architecture.num_experts &&
        !parameters.expert_range().holds(expert, architecture.num_experts))
      continue;
    core::throw_data_error(checkpoint.file_of(name),
                           "unexpected tensor '" + name + "' for a " + architecture.model_type +
                               " model with " + std::to_string(architecture.num_hidden_layers) +
                               " layers (does config.json match the weights?)");
  }
}

std::unique_ptr<Qwen3MoeModel> load_hf_model(const std::string& folder, ModelOptions options) {
  const auto architecture = config::load_hf_model_config(folder);
  auto model = std::make_unique<Qwen3MoeModel>(architecture, options);
  load_hf_weights(folder, model->parameters());
  return model;
}

bool export_fuses_experts(const config::ModelArchitecture& architecture) {
  return architecture.model_type == "qwen3_5_moe" || architecture.model_type == "qwen3_5_moe_text";
}

void save_hf_checkpoint(const std::string& folder, const Qwen3MoeParameters& parameters,
                        StoredDType dtype, std::uint64_t max_shard_bytes, ExpertGather* gather,
                        bool write, StageTensorRelay* relay) {
  save_hf_checkpoint(folder, parameters, dtype, max_shard_bytes,
                     WholeModelGathers{nullptr, nullptr, gather}, write, relay);
}

void save_hf_checkpoint(const std::string& folder, const Qwen3MoeParameters& parameters,
                        StoredDType dtype, std::uint64_t max_shard_bytes,
                        const WholeModelGathers& gathers, bool write, StageTensorRelay* relay) {
  const auto& architecture = parameters.architecture();
  const DiskLayout layout = export_layout(architecture);
  WholeExpertLayer experts(parameters, parameters.all_values(), gathers, write);
  std::vector<TensorToWrite> tensors;
  const std::vector<WholeModelTensor> whole = whole_model_tensors(parameters);
  std::vector<const WholeModelTensor*> sources;  // what each entry writes
  for (const WholeModelTensor& tensor : whole) {
    const bool runs_fill = write || takes_part(tensor, gathers);
    if (tensor.layer >= 0 && layout.fused_experts) {
      // One tensor per layer and part, every expert: gate_up_proj [E, 2I, h] (listed at
      // expert 0's gate) and down_proj [E, h, I] (at expert 0's down).
      if (tensor.expert != 0 || tensor.part == 1) continue;
      const bool down = tensor.part == 2;
      const std::int64_t rows = tensor.shape[0] * (down ? 1 : 2);
      TensorToWrite entry{fused_slice_of(layout, tensor.name).fused_name,
                          {architecture.num_experts, rows, tensor.shape[1]},
                          {},
                          {}};
      // Another stage's experts are routed to it; a helping rank fills what it takes part in.
      if (runs_fill && stage_holds(parameters, tensor)) {
        entry.fill = [&experts, layer = tensor.layer, down](std::span<float> out) {
          const std::span<const float> fused = experts.part(layer, down ? 1 : 0);
          if (experts.complete()) std::copy(fused.begin(), fused.end(), out.begin());
        };
      }
      tensors.push_back(std::move(entry));
      sources.push_back(&tensor);
      continue;
    }
    const std::string name = disk_name(layout, tensor.name);
    tensors.push_back(runs_fill ? tensor_to_write(tensor, name, parameters, parameters.all_values(),
                                                  experts, gathers.tensor_parallel)
                                : TensorToWrite{name, tensor.shape, {}, {}});
    sources.push_back(&tensor);
  }
  if (relay != nullptr) route_through_stages(tensors, sources, parameters, *relay);
  write_collectively(tensors, write, [&](std::span<const TensorToWrite> all) {
    write_safetensors_folder(folder, all, dtype, max_shard_bytes);
  });
  if (!write) return;
  const std::string config_path = (std::filesystem::path(folder) / "config.json").string();
  core::OutputFile out(config_path);
  out.write(config::to_hf_config_json(parameters.architecture()) + "\n");
  out.close();
}

}  // namespace dyncp::model
