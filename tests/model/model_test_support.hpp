#pragma once
// Helpers shared by the model tests: fixture paths, running a packed batch, gradient copies.

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "model/hf_checkpoint.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"

namespace dyncp::model::testing {

inline std::string fixture_dir(const std::string& name) {
  return std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/model/" + name;
}

// An empty folder under the system temp dir, named after the test.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dyncp_model_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct BatchRun {
  BinResult result;
  std::vector<float> per_token_loss;
  std::vector<float> final_hidden;  // [T, h]
  std::vector<float> grads;         // copy of the flat gradient buffer
};

// Packs `sequences` into one bin and runs forward + backward of the token-mean loss
// (gradients zeroed first).
inline BatchRun run_batch(Qwen3MoeModel& model, const TokenSequences& sequences) {
  const auto packed = pack_sequences(sequences);
  const std::int64_t tokens = packed.bin.token_ids.numel();
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  BatchRun run;
  run.per_token_loss.resize(static_cast<std::size_t>(tokens));
  run.final_hidden.resize(static_cast<std::size_t>(tokens * model.architecture().hidden_size));
  BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  options.per_token_loss =
      core::Tensor::view_of(run.per_token_loss.data(), {tokens}, core::DType::f32);
  options.final_hidden = core::Tensor::view_of(
      run.final_hidden.data(), {tokens, model.architecture().hidden_size}, core::DType::f32);
  LocalSeams seams;
  model.parameters().zero_grads();
  run.result = model.run_bin(packed.bin, seams.seams(), options);
  const auto& grads = model.parameters().all_grads();
  run.grads.assign(grads.data<float>(), grads.data<float>() + grads.numel());
  return run;
}

inline double relative_difference(const std::vector<double>& ours,
                                  const std::vector<double>& reference, double floor) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    diff += (ours[i] - reference[i]) * (ours[i] - reference[i]);
    norm += reference[i] * reference[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

}  // namespace dyncp::model::testing
