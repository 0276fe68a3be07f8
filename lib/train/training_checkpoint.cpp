#include "train/training_checkpoint.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/safetensors.hpp"
#include "train/checkpoint_store.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr int checkpoint_format = 1;

// The moment tensor of each HF tensor, as a view into a flat moment buffer.
core::Tensor moment_view(const model::Qwen3MoeParameters& parameters, const core::Tensor& flat,
                         const model::HfTensor& tensor) {
  const auto offset = static_cast<const float*>(tensor.value.raw_data()) -
                      static_cast<const float*>(parameters.all_values().raw_data());
  return core::Tensor::view_of(flat.data<float>() + offset, tensor.value.shape(), core::DType::f32);
}

std::vector<std::int64_t> dims_of(const core::Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

}  // namespace

void write_training_checkpoint(const fs::path& folder, const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state) {
  model::save_hf_checkpoint((folder / "model").string(), parameters, model::StoredDType::f32);

  std::vector<model::TensorToWrite> moments;
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    for (const auto& [prefix, flat] : {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const core::Tensor view = moment_view(parameters, *flat, tensor);
      moments.push_back({prefix + tensor.name, dims_of(view.shape()),
                         {view.data<float>(), static_cast<std::size_t>(view.numel())}});
    }
  }
  model::write_safetensors_file((folder / "optimizer.safetensors").string(), moments,
                                model::StoredDType::f32);

  const nlohmann::json json = {{"format", checkpoint_format},
                               {"iteration", state.iteration},
                               {"consumed_samples", state.consumed_samples},
                               {"epoch", state.epoch},
                               {"index_in_epoch", state.index_in_epoch},
                               {"skipped_steps", state.skipped_steps},
                               {"seed", state.seed}};
  // Written last and through CheckpointFile, so a full disk shows up as a failed save.
  CheckpointFile file(folder / "state.json");
  const std::string text = json.dump(2) + "\n";
  file.write(text.data(), text.size());
  file.close();
}

LoopState read_training_checkpoint(const fs::path& folder,
                                   const model::Qwen3MoeParameters& parameters,
                                   const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq) {
  const fs::path state_path = folder / "state.json";
  std::ifstream in(state_path);
  if (!in) core::throw_data_error(state_path.string(), "missing: not a training checkpoint folder");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    core::throw_data_error(state_path.string(), std::string("invalid JSON: ") + error.what());
  }
  LoopState state;
  try {
    if (json.at("format").get<int>() != checkpoint_format) {
      core::throw_data_error(state_path.string(), "checkpoint format " + json.at("format").dump() +
                                                      " is not the supported format " +
                                                      std::to_string(checkpoint_format));
    }
    state.iteration = json.at("iteration").get<std::int64_t>();
    state.consumed_samples = json.at("consumed_samples").get<std::int64_t>();
    state.epoch = json.at("epoch").get<std::int64_t>();
    state.index_in_epoch = json.at("index_in_epoch").get<std::int64_t>();
    state.skipped_steps = json.at("skipped_steps").get<std::int64_t>();
    state.seed = json.at("seed").get<std::int64_t>();
  } catch (const nlohmann::json::exception& error) {
    core::throw_data_error(state_path.string(), std::string("malformed state: ") + error.what());
  }

  model::load_hf_weights((folder / "model").string(), parameters);
  const model::SafetensorsFile moments((folder / "optimizer.safetensors").string());
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    for (const auto& [prefix, flat] : {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const core::Tensor view = moment_view(parameters, *flat, tensor);
      const std::string name = prefix + tensor.name;
      if (moments.find(name) == nullptr)
        core::throw_data_error(moments.path(), "missing optimizer tensor '" + name + "'");
      moments.read_f32(name, {view.data<float>(), static_cast<std::size_t>(view.numel())});
    }
  }
  return state;
}

}  // namespace dyncp::train
