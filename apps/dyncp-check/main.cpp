// dyncp-check: load an HF Qwen3-MoE checkpoint and a batch of token ids, run every sequence
// packed in one bin, and print the loss and the gradient norms (of the token-mean loss) so other
// implementations can be compared with ours. Exit codes: 0 ok, 2 bad input, 1 runtime failure.

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "../cli_main.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"

namespace {

struct Options {
  std::string hf_folder;
  std::string batch_path;
  bool json_output = false;
  bool aux_loss = false;
  bool recompute = false;
};

double norm_of(const dyncp::core::Tensor& tensor) {
  const float* values = tensor.data<float>();
  double sum = 0.0;
  for (std::int64_t i = 0; i < tensor.numel(); ++i)
    sum += static_cast<double>(values[i]) * values[i];
  return std::sqrt(sum);
}

int run(const Options& options) {
  using namespace dyncp;
  core::setup_logging({});
  model::ModelOptions model_options;
  model_options.recompute_full = options.recompute;
  model_options.aux_loss =
      options.aux_loss ? ops::MoeAuxLossType::seq_aux_loss : ops::MoeAuxLossType::none;
  const auto sequences = model::read_batch_json(options.batch_path);
  const auto model = model::load_hf_model(options.hf_folder, model_options);
  model::check_token_sequences(sequences, model->architecture().vocab_size, options.batch_path);

  const auto packed = model::pack_sequences(sequences);
  const std::int64_t tokens = packed.bin.token_ids.numel();
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  if (loss_tokens == 0)
    core::throw_data_error(options.batch_path,
                           "no sequence has two or more tokens, so there is "
                           "no next-token loss to compute");
  std::vector<float> per_token_loss(static_cast<std::size_t>(tokens));
  model::BinOptions bin_options;
  bin_options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
  bin_options.per_token_loss =
      core::Tensor::view_of(per_token_loss.data(), {tokens}, core::DType::f32);
  model::LocalSeams seams;
  model->parameters().zero_grads();
  const auto result = model->run_bin(packed.bin, seams.seams(), bin_options);

  nlohmann::ordered_json report;
  const double cross_entropy = result.loss_sum / static_cast<double>(result.loss_tokens);
  report["loss"] = cross_entropy + result.aux_loss;
  report["loss_sum"] = result.loss_sum;
  report["loss_tokens"] = result.loss_tokens;
  if (options.aux_loss) report["aux_loss"] = result.aux_loss;
  nlohmann::ordered_json per_sequence = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    double sum = 0.0;
    for (auto row = packed.sequence_offsets[s]; row < packed.sequence_offsets[s + 1]; ++row)
      sum += per_token_loss[static_cast<std::size_t>(row)];
    const auto count = static_cast<double>(sequences[s].size()) - 1;
    per_sequence.push_back(count > 0 ? nlohmann::ordered_json(sum / count)
                                     : nlohmann::ordered_json(nullptr));
  }
  report["per_sequence_loss"] = per_sequence;
  nlohmann::ordered_json grad_norms = nlohmann::ordered_json::object();
  double total = 0.0;
  for (const auto& tensor : model->parameters().hf_tensors()) {
    const double norm = norm_of(tensor.grad);
    total += norm * norm;
    grad_norms[tensor.name] = norm;
  }
  report["grad_norm"] = std::sqrt(total);
  report["grad_norms"] = grad_norms;

  if (options.json_output) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << "loss " << report["loss"].get<double>() << " over " << result.loss_tokens
              << " loss tokens (" << sequences.size() << " sequences)\n"
              << "grad_norm " << report["grad_norm"].get<double>() << "\n";
    if (options.aux_loss) std::cout << "aux_loss " << result.aux_loss << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dyncp-check: loss and gradient norms of an HF checkpoint on a batch of token "
      "ids (all sequences packed in one bin; labels are the next token)"};
  Options options;
  app.add_option("--hf", options.hf_folder, "HF checkpoint folder (config.json + safetensors)")
      ->required();
  app.add_option("--batch", options.batch_path, "JSON file {\"sequences\": [[token ids], ...]}")
      ->required();
  app.add_flag("--json", options.json_output,
               "Print {loss, loss_sum, loss_tokens, per_sequence_loss, grad_norm, grad_norms}");
  app.add_flag("--aux", options.aux_loss,
               "Add the MoE load-balancing loss (per-sequence form, averaged over the batch's "
               "sequences, times router_aux_loss_coef) to the loss and its gradients");
  app.add_flag("--recompute", options.recompute, "Recompute each layer's forward in backward");
  app.set_version_flag("--version", dyncp::core::version_string);
  return dyncp::apps::parse_and_run(app, argc, argv, "dyncp-check", [&] { return run(options); });
}
