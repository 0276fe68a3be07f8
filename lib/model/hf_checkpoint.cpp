#include "model/hf_checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include "config/model_architecture.hpp"
#include "core/error.hpp"

namespace dyncp::model {

namespace {

std::string shape_text(const core::Shape& shape) {
  return shape.to_string();
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool same_shape(const core::Shape& expected, const std::vector<std::int64_t>& stored) {
  if (static_cast<std::size_t>(expected.rank()) != stored.size()) return false;
  for (int i = 0; i < expected.rank(); ++i)
    if (expected[i] != stored[static_cast<std::size_t>(i)]) return false;
  return true;
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

}  // namespace

void load_hf_weights(const std::string& folder, const Qwen3MoeParameters& parameters) {
  const SafetensorsCheckpoint checkpoint(folder);
  std::set<std::string> expected_names;
  for (const auto& tensor : parameters.hf_tensors()) {
    expected_names.insert(tensor.name);
    const StoredTensorInfo* stored = checkpoint.find(tensor.name);
    if (stored == nullptr)
      core::throw_data_error(folder, "tensor '" + tensor.name + "' (shape " +
                                         shape_text(tensor.value.shape()) +
                                         ") is missing from the checkpoint");
    if (!same_shape(tensor.value.shape(), stored->shape))
      core::throw_data_error(checkpoint.file_of(tensor.name),
                             "tensor '" + tensor.name + "' has shape " + shape_text(stored->shape) +
                                 " but the model (config.json) needs " +
                                 shape_text(tensor.value.shape()));
    checkpoint.read_f32(tensor.name,
                        std::span<float>(tensor.value.data<float>(),
                                         static_cast<std::size_t>(tensor.value.numel())));
  }
  const bool tied = parameters.architecture().tie_word_embeddings;
  for (const auto& name : checkpoint.tensor_names()) {
    if (expected_names.count(name) != 0 || belongs_to_other_model_parts(name)) continue;
    if (tied && name == "lm_head.weight") continue;
    // Experts held by other ranks of the expert-parallel group.
    const std::int64_t expert = expert_index_of(name);
    if (expert >= 0 && expert < parameters.architecture().num_experts &&
        !parameters.expert_range().holds(expert, parameters.architecture().num_experts))
      continue;
    core::throw_data_error(checkpoint.file_of(name),
                           "unexpected tensor '" + name + "' for a " +
                               parameters.architecture().model_type + " model with " +
                               std::to_string(parameters.architecture().num_hidden_layers) +
                               " layers (does config.json match the weights?)");
  }
}

std::unique_ptr<Qwen3MoeModel> load_hf_model(const std::string& folder, ModelOptions options) {
  const auto architecture = config::load_hf_model_config(folder);
  if (architecture.model_type != "qwen3_moe")
    core::throw_data_error((std::filesystem::path(folder) / "config.json").string(),
                           "model_type '" + architecture.model_type +
                               "' is not supported by this build's model (expected qwen3_moe)");
  auto model = std::make_unique<Qwen3MoeModel>(architecture, options);
  load_hf_weights(folder, model->parameters());
  return model;
}

void save_hf_checkpoint(const std::string& folder, const Qwen3MoeParameters& parameters,
                        StoredDType dtype, std::uint64_t max_shard_bytes) {
  std::vector<TensorToWrite> tensors;
  tensors.reserve(parameters.hf_tensors().size());
  for (const auto& tensor : parameters.hf_tensors()) {
    std::vector<std::int64_t> shape;
    for (int i = 0; i < tensor.value.rank(); ++i) shape.push_back(tensor.value.size(i));
    tensors.push_back({tensor.name, shape,
                       std::span<const float>(tensor.value.data<float>(),
                                              static_cast<std::size_t>(tensor.value.numel()))});
  }
  write_safetensors_folder(folder, tensors, dtype, max_shard_bytes);
  const std::string config_path = (std::filesystem::path(folder) / "config.json").string();
  std::ofstream out(config_path, std::ios::trunc);
  if (!out) core::throw_runtime_error("cannot create " + config_path);
  out << config::to_hf_config_json(parameters.architecture()) << "\n";
}

}  // namespace dyncp::model
