#include "train/training_checkpoint.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <exception>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/json_text_check.hpp"
#include "core/output_file.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/safetensors.hpp"
#include "train/checkpoint_store.hpp"
#include "train/format1_checkpoint.hpp"
#include "train/sharded_checkpoint.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t max_state_bytes = 64 * 1024;

// The moment tensor of an HF tensor, as a view into a flat moment buffer (storage order).
core::Tensor moment_view(const model::Qwen3MoeParameters& parameters, const core::Tensor& flat,
                         const model::HfTensor& tensor) {
  const auto offset = static_cast<const float*>(tensor.value.raw_data()) -
                      static_cast<const float*>(parameters.all_values().raw_data());
  return core::Tensor::view_of(flat.data<float>() + offset, tensor.value.shape(), core::DType::f32);
}

}  // namespace

void write_training_checkpoint(const fs::path& folder, const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state, model::ExpertGather* gather, bool write,
                               model::StageTensorRelay* relay) {
  write_training_checkpoint(folder, parameters, exp_avg, exp_avg_sq, state,
                            model::WholeModelGathers{nullptr, nullptr, gather}, write, relay);
}

void write_training_checkpoint(const fs::path& folder, const model::Qwen3MoeParameters& parameters,
                               const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq,
                               const LoopState& state, const model::WholeModelGathers& gathers,
                               bool write, model::StageTensorRelay* relay) {
  // A failed model write must not skip the moments' gathers the other ranks are making.
  std::exception_ptr failure;
  try {
    model::save_hf_checkpoint((folder / "model").string(), parameters, model::StoredDType::f32, 0,
                              gathers, write, relay);
  } catch (...) {
    failure = std::current_exception();
  }

  model::WholeExpertLayer avg_experts(parameters, exp_avg, gathers, write);
  model::WholeExpertLayer avg_sq_experts(parameters, exp_avg_sq, gathers, write);
  std::vector<model::TensorToWrite> moments;
  const std::vector<model::WholeModelTensor> whole = model::whole_model_tensors(parameters);
  std::vector<const model::WholeModelTensor*> sources;  // what each entry writes
  for (const model::WholeModelTensor& tensor : whole) {
    for (const auto& [prefix, flat, experts] :
         {std::tuple{"exp_avg.", &exp_avg, &avg_experts},
          std::tuple{"exp_avg_sq.", &exp_avg_sq, &avg_sq_experts}}) {
      const std::string name = prefix + tensor.name;
      moments.push_back(write || model::takes_part(tensor, gathers)
                            ? model::tensor_to_write(tensor, name, parameters, *flat, *experts,
                                                     gathers.tensor_parallel)
                            : model::TensorToWrite{name, tensor.shape, {}, {}});
      sources.push_back(&tensor);
    }
  }
  if (relay != nullptr) model::route_through_stages(moments, sources, parameters, *relay);
  model::write_collectively(
      moments, write && !failure, [&](std::span<const model::TensorToWrite> all) {
        model::write_safetensors_file((folder / "optimizer.safetensors").string(), all,
                                      model::StoredDType::f32);
      });
  if (failure) std::rethrow_exception(failure);
  if (!write) return;

  // Written last: the loop state says the files before it are complete. Always format 2,
  // whatever format the run resumed from.
  LoopState saved = state;
  saved.format = 2;
  core::OutputFile file(folder / "state.json");
  file.write(loop_state_json(saved));
  file.close();
}

LoopState read_training_checkpoint(const fs::path& folder, std::int64_t iteration,
                                   const model::Qwen3MoeParameters& parameters,
                                   const core::Tensor& exp_avg, const core::Tensor& exp_avg_sq) {
  if (is_sharded_checkpoint(folder)) {  // format 3: every rank's file and an index
    const parallel::ParameterRange everything{0, parameters.all_values().numel(), false, true};
    return read_sharded_checkpoint(folder, iteration, parameters, exp_avg, exp_avg_sq,
                                   std::span<const parallel::ParameterRange>(&everything, 1));
  }
  const fs::path state_path = folder / "state.json";
  std::error_code error;
  if (!fs::is_regular_file(state_path, error))
    core::throw_data_error(state_path.string(), "missing: not a training checkpoint folder");
  if (fs::file_size(state_path, error) > max_state_bytes)
    core::throw_data_error(state_path.string(), "larger than 64 KiB: not a loop state");
  std::ifstream in(state_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A format-1 folder was checked for structure when it was chosen (CheckpointStore::select).
  const LoopState state = is_format1_checkpoint(folder)
                              ? parse_format1_loop_state(text, state_path.string(), iteration)
                              : parse_loop_state(text, state_path.string(), iteration);
  if (state.format == 3)
    core::throw_data_error(state_path.string(),
                           "format 3 (sharded) but the folder has no index.json");

  // Only the tensors these parameters hold: under EP, this rank's experts.
  model::load_hf_weights((folder / "model").string(), parameters);
  const model::SafetensorsFile moments((folder / "optimizer.safetensors").string());
  std::vector<float> buffer;
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    for (const auto& [prefix, flat] :
         {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const core::Tensor view = moment_view(parameters, *flat, tensor);
      const std::string name = prefix + tensor.name;
      if (moments.find(name) == nullptr)
        core::throw_data_error(moments.path(), "missing optimizer tensor '" + name + "'");
      // The whole tensor: a tensor-parallel rank keeps its piece of it.
      buffer.resize(static_cast<std::size_t>(tensor.hf_numel()));
      moments.read_f32(name, buffer);
      tensor.write_hf_order(buffer.data(), view);
    }
  }
  return state;
}

}  // namespace dyncp::train
