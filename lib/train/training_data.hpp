#pragma once
// The samples a run reads: the mock generator (dataset.type mock_varlen) or the prepared,
// tokenized cache of the recipe's data file. The trainer and `--dry-run` open data the same way;
// the dry run differs only in never paying for a full tokenization.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "config/config_container.hpp"
#include "data/prepared_dataset.hpp"
#include "data/sample.hpp"
#include "data/sampler.hpp"
#include "data/tokenizer.hpp"

namespace dyncp::train {

struct TrainingData {
  std::unique_ptr<data::SampleSource> source;  // null when a preview could not open the data
  std::unique_ptr<data::Tokenizer> tokenizer;  // null for mock data
  std::int32_t pad_token_id = 0;
  std::int64_t skipped_samples = 0;  // filtered while preparing (too long, no loss, bad)
  std::string description;           // where the samples come from, for logs and the preview
};

// The folder holding tokenizer.json: tokenizer.tokenizer_model, else model.hf_model_path.
// Config error naming tokenizer.tokenizer_model when both are empty.
std::filesystem::path tokenizer_directory(const config::ConfigContainer& config);

// Opens the data for training, preparing (tokenizing) the cache when it does not exist yet.
// One process prepares under a file lock while the others wait on it.
TrainingData open_training_data(const config::ConfigContainer& config);

// Opens data for `--dry-run` without a full tokenization: the mock generator, else the full
// prepared cache when it already exists, else a cache of only the first `max_records` records.
// When the data file or the tokenizer is missing, `source` stays null and `description` says
// why (a dry run must still report the rest); malformed data still throws.
TrainingData open_preview_data(const config::ConfigContainer& config, std::int64_t max_records);

// The held-out data of validation.eval_interval: dataset.validation_data_path prepared like the
// training data, or, for mock_varlen, mock samples drawn with another seed.
TrainingData open_validation_data(const config::ConfigContainer& config);

// The recipe's tokenizer (tokenizer.tokenizer_model, else model.hf_model_path); a config error
// when its vocabulary does not fit model.vocab_size.
std::unique_ptr<data::Tokenizer> load_tokenizer(const config::ConfigContainer& config);

// What `dataset.*` asks the preparation step to do (dyncp-data prepare --config uses it too).
data::PrepareOptions prepare_options(const config::ConfigContainer& config);

// The global-batch sampler the recipe asks for (dataset.dataloader_type, rng.seed,
// train.global_batch_size): the trainer and the dry-run preview draw the same batches.
data::SamplerOptions sampler_options(const config::ConfigContainer& config);

}  // namespace dyncp::train
