#include "train/training_data.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "config/chat_role_names.hpp"
#include "core/error.hpp"
#include "data/mock_dataset.hpp"
#include "data/prepared_dataset.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

std::unique_ptr<data::Tokenizer> load_tokenizer(const config::ConfigContainer& config) {
  if (config.tokenizer.tokenizer_type == config::TokenizerType::NullTokenizer) {
    // Token-id data needs no vocabulary file: ids are checked against model.vocab_size.
    return std::make_unique<data::Tokenizer>(data::Tokenizer::null_tokenizer(
        static_cast<std::int32_t>(config.model.architecture.vocab_size)));
  }
  auto tokenizer = std::make_unique<data::Tokenizer>(
      data::Tokenizer::from_directory(tokenizer_directory(config)));
  if (tokenizer->vocab_size() > config.model.architecture.vocab_size) {
    core::throw_config_error("model.vocab_size",
                             std::to_string(config.model.architecture.vocab_size) +
                                 ": smaller than the tokenizer's " +
                                 std::to_string(tokenizer->vocab_size()) + " ids");
  }
  return tokenizer;
}

data::PrepareOptions prepare_options(const config::ConfigContainer& config) {
  const auto& dataset = config.dataset;
  data::PrepareOptions prepare;
  data::DatasetFormat format = data::DatasetFormat::chat_jsonl;
  if (dataset.type == config::DatasetType::token_jsonl) format = data::DatasetFormat::tokens_jsonl;
  if (dataset.type == config::DatasetType::megatron_indexed) format = data::DatasetFormat::indexed;
  data::DatasetInput input{dataset.data_path, format, {}};
  input.chat.template_kwargs_json = dataset.chat_template_kwargs;
  input.chat.fields.messages_key = dataset.chat_messages_key;
  input.chat.fields.role_key = dataset.chat_role_key;
  input.chat.fields.content_key = dataset.chat_content_key;
  input.chat.fields.role_names = config::parse_chat_role_names(dataset.chat_role_names).pairs;
  prepare.inputs.push_back(std::move(input));
  prepare.cache_dir = dataset.cache_dir;
  prepare.seq_length = dataset.seq_length.value_or(config.model.seq_length);
  prepare.truncation = static_cast<data::Truncation>(static_cast<int>(dataset.truncation));
  prepare.on_bad_sample = static_cast<data::OnBadSample>(static_cast<int>(dataset.on_bad_sample));
  prepare.num_workers = static_cast<int>(dataset.num_workers);
  return prepare;
}

namespace {

TrainingData open_mock_data(const config::ConfigContainer& config) {
  const auto& dataset = config.dataset;
  data::MockVarlenOptions options;
  options.distribution = dataset.mock_length_distribution;
  options.num_samples = dataset.mock_num_samples;
  options.vocab_size = static_cast<std::int32_t>(config.model.architecture.vocab_size);
  options.seed = static_cast<std::uint64_t>(config.rng.seed);
  TrainingData out;
  out.source = std::make_unique<data::MockVarlenDataset>(options);
  out.description = "mock_varlen " + dataset.mock_length_distribution;
  return out;
}

void adopt_prepared(TrainingData& out, const fs::path& cache) {
  auto prepared = std::make_unique<data::PreparedDataset>(cache, out.tokenizer.get());
  const auto& stats = prepared->stats();
  out.pad_token_id = out.tokenizer->pad_token_id();
  out.skipped_samples =
      static_cast<std::int64_t>(stats.dropped_too_long + stats.dropped_no_loss + stats.skipped_bad);
  spdlog::info(
      "data: {} samples, {} tokens ({} loss tokens); filtered: {} too long, {} without "
      "loss tokens, {} bad records skipped, {} truncated",
      stats.samples_kept, stats.total_tokens, stats.total_loss_tokens, stats.dropped_too_long,
      stats.dropped_no_loss, stats.skipped_bad, stats.truncated);
  out.source = std::move(prepared);
}

// A Megatron indexed dataset is named by its prefix; the files are prefix.bin / prefix.idx.
bool data_file_exists(const config::DatasetConfig& dataset) {
  if (dataset.data_path.empty()) return false;
  if (dataset.type == config::DatasetType::megatron_indexed)
    return fs::exists(dataset.data_path + ".bin") && fs::exists(dataset.data_path + ".idx");
  return fs::is_regular_file(dataset.data_path);
}

}  // namespace

fs::path tokenizer_directory(const config::ConfigContainer& config) {
  fs::path path = config.tokenizer.tokenizer_model.empty()
                      ? fs::path(config.model.hf_model_path)
                      : fs::path(config.tokenizer.tokenizer_model);
  if (path.filename() == "tokenizer.json") path = path.parent_path();
  if (path.empty()) {
    core::throw_config_error("tokenizer.tokenizer_model",
                             "must name a folder holding tokenizer.json for dataset.type " +
                                 std::string(config::to_string(config.dataset.type)));
  }
  return path;
}

TrainingData open_training_data(const config::ConfigContainer& config) {
  if (config.dataset.type == config::DatasetType::mock_varlen) return open_mock_data(config);
  TrainingData out;
  out.tokenizer = load_tokenizer(config);
  const fs::path cache = data::prepare_dataset(prepare_options(config), *out.tokenizer);
  adopt_prepared(out, cache);
  out.description = config.dataset.data_path + " (prepared cache " + cache.string() + ")";
  return out;
}

TrainingData open_preview_data(const config::ConfigContainer& config, std::int64_t max_records) {
  if (config.dataset.type == config::DatasetType::mock_varlen) return open_mock_data(config);
  TrainingData out;
  const auto& dataset = config.dataset;
  if (!data_file_exists(dataset)) {
    out.description = "dataset.data_path '" + dataset.data_path +
                      "' does not exist here; prepare the data (dyncp-data prepare) or set "
                      "dataset.type=mock_varlen to preview on synthetic lengths";
    return out;
  }
  const bool null_tokenizer =
      config.tokenizer.tokenizer_type == config::TokenizerType::NullTokenizer;
  const fs::path tokenizer_dir = null_tokenizer ? fs::path() : tokenizer_directory(config);
  if (!null_tokenizer && !fs::exists(tokenizer_dir / "tokenizer.json")) {
    out.description = "no tokenizer.json in '" + tokenizer_dir.string() +
                      "' (tokenizer.tokenizer_model / model.hf_model_path); the data cannot be "
                      "tokenized here";
    return out;
  }
  out.tokenizer = load_tokenizer(config);
  data::PrepareOptions prepare = prepare_options(config);
  const fs::path full_cache = data::prepared_cache_path(prepare, *out.tokenizer);
  if (fs::exists(full_cache)) {
    adopt_prepared(out, full_cache);
    out.description = dataset.data_path + " (prepared cache " + full_cache.string() + ")";
    return out;
  }
  prepare.max_records = max_records;
  adopt_prepared(out, data::prepare_dataset(prepare, *out.tokenizer));
  out.description = "the first " + std::to_string(max_records) + " records of " +
                    dataset.data_path + " (no prepared cache yet; training tokenizes all of it)";
  return out;
}

data::SamplerOptions sampler_options(const config::ConfigContainer& config) {
  data::SamplerOptions options;
  // dataset.shuffle decides the order for every loader type: a seeded permutation per epoch
  // (resumable: it depends only on rng.seed and the epoch), or file order. `cyclic` is
  // Megatron's random sampler, which always shuffles (shuffle=false with it is refused).
  options.type =
      config.dataset.shuffle || config.dataset.dataloader_type == config::DataloaderType::cyclic
          ? data::SamplerType::cyclic
          : data::SamplerType::single;
  options.seed = static_cast<std::uint64_t>(config.rng.seed);
  options.global_batch_size = config.train.global_batch_size;
  return options;
}

TrainingData open_validation_data(const config::ConfigContainer& config) {
  config::ConfigContainer held_out = config;
  if (config.dataset.type == config::DatasetType::mock_varlen) {
    held_out.rng.seed = config.rng.seed + 1;  // other samples than the training ones
  } else {
    held_out.dataset.data_path = config.dataset.validation_data_path;
  }
  return open_training_data(held_out);
}

}  // namespace dyncp::train
