// dyncp-export: turn a training checkpoint into an HF folder that transformers loads and chats
// with (the same export as checkpoint.export_hf at the end of training). Exit codes: 0 ok,
// 2 bad usage or input, 1 runtime failure.
//
//   dyncp-export --checkpoint DIR --out DIR [--tokenizer DIR | --no-tokenizer] [--dtype bf16|fp32]
//
// DIR is a checkpoint.save folder (its newest checkpoint, by `latest`) or one iter_* folder.
// The tokenizer defaults to the one named in the resolved config.yaml that training saved
// beside the checkpoints.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>

#include "../cli_main.hpp"
#include "config/config_loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "core/version.hpp"
#include "model/hf_checkpoint.hpp"
#include "train/checkpoint_store.hpp"
#include "train/hf_export.hpp"
#include "train/sharded_checkpoint.hpp"
#include "train/training_data.hpp"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string checkpoint;
  std::string out;
  std::string tokenizer;
  bool no_tokenizer = false;
  std::string dtype = "bf16";
};

fs::path checkpoint_folder(const fs::path& given) {
  using dyncp::core::throw_data_error;
  if (fs::exists(given / "model" / "config.json")) return given;
  // The checkpoint a resume would load: `latest` if it verifies, else the newest verifying one.
  if (const auto choice = dyncp::train::CheckpointStore::select(given)) return choice->folder;
  throw_data_error(given.string(),
                   "holds no training checkpoint (neither model/config.json nor a `latest` file "
                   "naming one); pass a checkpoint.save folder or one of its iter_* folders");
  return {};
}

// The model of a checkpoint folder: model/ is an HF folder, or (a sharded checkpoint) holds
// only the config and every rank's shard holds its slices of the weights.
std::unique_ptr<dyncp::model::Qwen3MoeModel> checkpoint_model(const fs::path& folder) {
  using namespace dyncp;
  if (!train::is_sharded_checkpoint(folder))
    return model::load_hf_model((folder / "model").string());
  auto model = std::make_unique<model::Qwen3MoeModel>(
      config::load_hf_model_config((folder / "model").string()));
  const std::string name = folder.filename().string();
  if (name.rfind("iter_", 0) != 0 || name.size() == 5 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    core::throw_data_error(folder.string(), "a sharded checkpoint's folder is named iter_N");
  const core::Tensor unused = core::Tensor::zeros({1}, core::DType::f32);  // no moments read
  train::read_sharded_checkpoint(folder, std::stoll(name.substr(5)), model->parameters(), unused,
                                 unused, {});
  return model;
}

// The tokenizer of the run, from the config.yaml saved beside the checkpoints.
fs::path tokenizer_of_run(const fs::path& folder) {
  using namespace dyncp;
  const fs::path saved = folder.parent_path() / "config.yaml";
  const std::string fix = "; pass --tokenizer DIR, or --no-tokenizer for the weights only";
  if (!fs::exists(saved))
    core::throw_usage_error("no config.yaml beside " + folder.string() + " names the tokenizer" +
                            fix);
  try {
    const auto config = config::load_config_file(saved.string(), {});
    if (config.tokenizer.tokenizer_model.empty() && config.model.hf_model_path.empty())
      core::throw_usage_error(saved.string() + " names no tokenizer (mock data?)" + fix);
    return train::tokenizer_directory(config);
  } catch (const core::Error& error) {
    if (error.kind() == core::ErrorKind::usage) throw;
    core::throw_usage_error("cannot read the tokenizer from " + saved.string() + ": " +
                            error.what() + fix);
  }
  return {};
}

int run(const Options& options) {
  using namespace dyncp;
  core::setup_logging({});
  core::ignore_file_size_limit_signal();  // a write past `ulimit -f` is an error naming the file
  const fs::path folder = checkpoint_folder(options.checkpoint);
  const model::StoredDType dtype =
      options.dtype == "fp32" ? model::StoredDType::f32 : model::StoredDType::bf16;
  const fs::path tokenizer = options.no_tokenizer         ? fs::path()
                             : !options.tokenizer.empty() ? fs::path(options.tokenizer)
                                                          : tokenizer_of_run(folder);
  if (!tokenizer.empty() && !fs::exists(tokenizer / "tokenizer.json"))
    core::throw_usage_error("--tokenizer " + tokenizer.string() + ": holds no tokenizer.json");
  const auto model = checkpoint_model(folder);
  fs::create_directories(options.out);
  model::save_hf_checkpoint(options.out, model->parameters(), dtype, train::hf_export_shard_bytes);
  train::complete_hf_export(options.out, tokenizer, dtype, model->architecture());
  std::cout << "exported " << folder.string() << " to " << options.out << " ("
            << train::torch_dtype_name(dtype) << ", "
            << (tokenizer.empty() ? std::string("no tokenizer")
                                  : "tokenizer from " + tokenizer.string())
            << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dyncp-export: convert a dyncp-train checkpoint into an HF folder (weights, "
      "config, tokenizer with its chat template, generation config)"};
  Options options;
  app.add_option("--checkpoint", options.checkpoint,
                 "checkpoint.save folder (its newest checkpoint) or one iter_* folder")
      ->required();
  app.add_option("--out", options.out, "Folder to write the HF export into")->required();
  auto* tokenizer = app.add_option("--tokenizer", options.tokenizer,
                                   "Tokenizer folder to copy (default: the run's, from the "
                                   "config.yaml saved beside the checkpoints)");
  app.add_flag("--no-tokenizer", options.no_tokenizer, "Export the weights and config only")
      ->excludes(tokenizer);
  app.add_option("--dtype", options.dtype, "Stored dtype of the weights")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  app.set_version_flag("--version", dyncp::core::version_string);
  return dyncp::apps::parse_and_run(app, argc, argv, "dyncp-export", [&] { return run(options); });
}
