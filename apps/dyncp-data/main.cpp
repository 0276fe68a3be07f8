// dyncp-data: tokenize text, render chat samples with their loss mask, prepare and inspect
// datasets. Exit codes: 0 ok, 2 bad usage or bad input, 1 runtime failure.

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../cli_main.hpp"
#include "config/config_loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "data/chat_json.hpp"
#include "data/chat_template.hpp"
#include "data/dataset_source.hpp"
#include "data/prepared_dataset.hpp"
#include "data/tokenizer.hpp"
#include "inspect_report.hpp"
#include "train/training_data.hpp"

namespace {

using namespace dyncp;

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) core::throw_usage_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string join_ids(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

struct TokenizeArgs {
  std::string tokenizer_dir, text, text_file;
  bool json = false;
};

int run_tokenize(const TokenizeArgs& args) {
  const data::Tokenizer tokenizer = data::Tokenizer::from_directory(args.tokenizer_dir);
  const std::string text = args.text_file.empty() ? args.text : read_file_bytes(args.text_file);
  const auto ids = tokenizer.encode(text, args.text_file.empty() ? "--text" : args.text_file);
  if (args.json) {
    std::cout << nlohmann::json({{"ids", ids}}).dump() << "\n";
  } else {
    std::cout << join_ids(ids) << "\n";
  }
  return 0;
}

struct RenderArgs {
  std::string tokenizer_dir, sample, file, template_kwargs;
  std::int64_t line = 1;
  bool json = false;
};

// Reads line `line` (1-based, counting blank lines) of a JSONL file.
std::string jsonl_line(const std::string& path, std::int64_t line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) core::throw_usage_error("cannot read " + path);
  std::string text;
  for (std::int64_t k = 1; std::getline(in, text); ++k) {
    if (k == line) return text;
  }
  core::throw_usage_error(path + " has fewer than " + std::to_string(line) + " lines");
}

int run_render(const RenderArgs& args) {
  const data::Tokenizer tokenizer = data::Tokenizer::from_directory(args.tokenizer_dir);
  const data::ChatTemplate chat_template =
      data::ChatTemplate::from_tokenizer(tokenizer, args.tokenizer_dir);
  const std::string where =
      args.file.empty() ? "--sample" : args.file + ":" + std::to_string(args.line);
  const std::string sample_text =
      args.file.empty() ? args.sample : jsonl_line(args.file, args.line);
  const data::ChatTemplateKwargs kwargs =
      data::parse_template_kwargs(args.template_kwargs, "--template-kwargs");
  const data::ChatSample sample = data::parse_chat_sample(sample_text, where);
  const data::TokenizedChat chat =
      data::tokenize_chat(tokenizer, chat_template, sample, kwargs, where);
  if (args.json) {
    const auto rendered = chat_template.render(sample, kwargs, where);
    std::cout << nlohmann::json(
                     {{"text", rendered.text}, {"ids", chat.tokens}, {"loss_mask", chat.loss_mask}})
                     .dump()
              << "\n";
    return 0;
  }
  // Supervised spans are shown between ⟦ and ⟧.
  bool in_loss = false;
  std::size_t loss_tokens = 0;
  for (std::size_t i = 0; i < chat.tokens.size(); ++i) {
    if (chat.loss_mask[i] && !in_loss) std::cout << "⟦";
    if (!chat.loss_mask[i] && in_loss) std::cout << "⟧";
    in_loss = chat.loss_mask[i] != 0;
    loss_tokens += chat.loss_mask[i];
    std::cout << tokenizer.decode(std::span(&chat.tokens[i], 1));
  }
  if (in_loss) std::cout << "⟧";
  std::cout << "\n-- " << chat.tokens.size() << " tokens, " << loss_tokens
            << " with loss (inside ⟦ ⟧)\n";
  return 0;
}

struct PrepareArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string tokenizer_dir, format = "chat_jsonl", cache_dir, truncation = "drop",
                             on_bad_sample = "error";
  std::vector<std::string> inputs;
  std::int64_t seq_length = 4096;
  std::int64_t max_records = 0;
  int num_workers = 1;
};

// `prepare --config recipe.yaml`: the same cache dyncp-train would prepare for that recipe.
int run_prepare_recipe(const PrepareArgs& args) {
  const config::ConfigContainer config = config::load_config_file(args.config_path, args.overrides);
  if (config.dataset.type == config::DatasetType::mock_varlen) {
    core::throw_usage_error("dataset.type is mock_varlen in " + args.config_path +
                            ": mock data is generated on the fly and needs no preparation");
  }
  const auto tokenizer = train::load_tokenizer(config);
  const auto path = data::prepare_dataset(train::prepare_options(config), *tokenizer);
  const data::PreparedDataset dataset(path, tokenizer.get());
  std::cout << apps::format_inspect_report(dataset);
  return 0;
}

int run_prepare(const PrepareArgs& args) {
  if (!args.config_path.empty()) return run_prepare_recipe(args);
  if (args.tokenizer_dir.empty() || args.inputs.empty() || args.cache_dir.empty()) {
    core::throw_usage_error(
        "prepare needs --config RECIPE, or all of --tokenizer, --input and --cache-dir");
  }
  const data::Tokenizer tokenizer = data::Tokenizer::from_directory(args.tokenizer_dir);
  data::PrepareOptions options;
  const data::DatasetFormat format = data::parse_dataset_format(args.format, "--format");
  for (const std::string& input : args.inputs) options.inputs.push_back({input, format});
  options.cache_dir = args.cache_dir;
  options.seq_length = args.seq_length;
  options.max_records = args.max_records;
  options.num_workers = args.num_workers;
  options.truncation = data::parse_truncation(args.truncation, "--truncation");
  options.on_bad_sample = data::parse_on_bad_sample(args.on_bad_sample, "--on-bad-sample");
  options.skip_bad_samples_hint = "pass --on-bad-sample skip";
  const auto path = data::prepare_dataset(options, tokenizer);
  const data::PreparedDataset dataset(path, &tokenizer);
  std::cout << apps::format_inspect_report(dataset);
  return 0;
}

struct BenchArgs {
  std::string tokenizer_dir, text_file;
  int repeats = 3;
};

// Single-thread encode throughput over documents separated by U+001E (record separator); one
// JSON line with the median and best MB/s of `repeats` passes (the first pass starts cold).
int run_bench_tokenizer(const BenchArgs& args) {
  const data::Tokenizer tokenizer = data::Tokenizer::from_directory(args.tokenizer_dir);
  const std::string corpus = read_file_bytes(args.text_file);
  std::vector<std::string_view> documents;
  for (std::size_t start = 0; start <= corpus.size();) {
    const std::size_t end = std::min(corpus.find('\x1e', start), corpus.size());
    documents.push_back(std::string_view(corpus).substr(start, end - start));
    start = end + 1;
  }
  std::vector<double> seconds;
  std::size_t total_tokens = 0;
  for (int pass = 0; pass < args.repeats; ++pass) {
    total_tokens = 0;
    const auto started = std::chrono::steady_clock::now();
    for (const std::string_view document : documents)
      total_tokens += tokenizer.encode(document).size();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double megabytes = static_cast<double>(corpus.size()) / 1e6;
  std::cout << nlohmann::json({{"implementation", "dyncp"},
                               {"bytes", corpus.size()},
                               {"documents", documents.size()},
                               {"tokens", total_tokens},
                               {"median_mb_per_s", megabytes / seconds[seconds.size() / 2]},
                               {"best_mb_per_s", megabytes / seconds.front()},
                               {"cold_first_pass_included", true}})
                   .dump()
            << "\n";
  return 0;
}

struct InspectArgs {
  std::string cache, tokenizer_dir;
  bool json = false;
};

int run_inspect(const InspectArgs& args) {
  std::optional<data::Tokenizer> tokenizer;
  if (!args.tokenizer_dir.empty()) tokenizer = data::Tokenizer::from_directory(args.tokenizer_dir);
  const data::PreparedDataset dataset(args.cache, tokenizer ? &*tokenizer : nullptr);
  std::cout << (args.json ? apps::format_inspect_json(dataset) + "\n"
                          : apps::format_inspect_report(dataset));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dyncp-data: tokenize text, render chat samples, prepare and inspect datasets"};
  app.require_subcommand(1);

  TokenizeArgs tokenize;
  auto* tokenize_command = app.add_subcommand("tokenize", "Text to token ids");
  tokenize_command->add_option("--tokenizer", tokenize.tokenizer_dir, "HF tokenizer directory")
      ->required();
  auto* text_option = tokenize_command->add_option("--text", tokenize.text, "Text to tokenize");
  auto* text_file_option = tokenize_command->add_option("--text-file", tokenize.text_file,
                                                        "File whose bytes are the text");
  text_option->excludes(text_file_option);
  tokenize_command->add_flag("--json", tokenize.json, "Print {\"ids\": [...]}");

  RenderArgs render;
  auto* render_command = app.add_subcommand("render", "Show a chat sample's tokens and loss mask");
  render_command->add_option("--tokenizer", render.tokenizer_dir, "HF tokenizer directory")
      ->required();
  auto* sample_option =
      render_command->add_option("--sample", render.sample, "One chat sample as JSON");
  auto* file_option = render_command->add_option("--file", render.file, "Chat JSONL file");
  sample_option->excludes(file_option);
  render_command->add_option("--line", render.line, "Line of --file (1-based)")
      ->check(CLI::PositiveNumber);
  render_command->add_flag("--json", render.json, "Print text, ids and loss mask as JSON");
  render_command->add_option("--template-kwargs", render.template_kwargs,
                             "Extra chat-template variables as a JSON object, e.g. "
                             "'{\"enable_thinking\": false}'");

  PrepareArgs prepare;
  auto* prepare_command = app.add_subcommand("prepare", "Tokenize datasets into a prepared cache");
  prepare_command->add_option("--config", prepare.config_path,
                              "Recipe YAML: prepare exactly what dyncp-train would (dataset.*)");
  prepare_command->add_option("overrides", prepare.overrides,
                              "key.path=value overrides of the recipe, after the options");
  prepare_command->add_option("--tokenizer", prepare.tokenizer_dir, "HF tokenizer directory");
  prepare_command->add_option("--input", prepare.inputs,
                              "Input file (or .bin/.idx prefix); repeatable");
  prepare_command
      ->add_option(
          "--format", prepare.format,
          "chat_jsonl | token_jsonl | megatron_indexed (dataset.type's names; tokens_jsonl and "
          "indexed also accepted)")
      ->capture_default_str();
  prepare_command->add_option("--cache-dir", prepare.cache_dir, "Where the cache is written");
  prepare_command->add_option("--seq-length", prepare.seq_length, "Longest sample in tokens")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 30));
  prepare_command->add_option("--truncation", prepare.truncation, "drop | truncate | error")
      ->capture_default_str();
  prepare_command->add_option("--on-bad-sample", prepare.on_bad_sample, "error | skip")
      ->capture_default_str();
  prepare_command
      ->add_option("--max-records", prepare.max_records, "Read only this many records (0 = all)")
      ->check(CLI::NonNegativeNumber);
  prepare_command
      ->add_option("--num-workers", prepare.num_workers,
                   "Threads that tokenize records (dataset.num_workers; with --config the "
                   "recipe's value is used)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));

  InspectArgs inspect;
  auto* inspect_command = app.add_subcommand("inspect", "Summarize a prepared cache");
  inspect_command->add_option("cache", inspect.cache, "Prepared cache file")->required();
  inspect_command->add_option("--tokenizer", inspect.tokenizer_dir,
                              "Check the cache was made with this tokenizer");
  inspect_command->add_flag("--json", inspect.json, "Print the summary as JSON");

  BenchArgs bench;
  auto* bench_command =
      app.add_subcommand("bench-tokenizer", "Single-thread tokenizer throughput (MB/s)");
  bench_command->add_option("--tokenizer", bench.tokenizer_dir, "HF tokenizer directory")
      ->required();
  bench_command->add_option("--text-file", bench.text_file, "Corpus, documents separated by U+001E")
      ->required();
  bench_command->add_option("--repeats", bench.repeats, "Timed passes")->check(CLI::Range(1, 100));

  return dyncp::apps::parse_and_run(app, argc, argv, "dyncp-data", [&] {
    dyncp::core::setup_logging({});
    // A cache write past `ulimit -f` then fails naming the file, instead of a SIGXFSZ kill.
    dyncp::core::ignore_file_size_limit_signal();
    if (*tokenize_command) {
      if (tokenize.text_file.empty() && text_option->count() == 0) {
        dyncp::core::throw_usage_error("tokenize needs --text or --text-file");
      }
      return run_tokenize(tokenize);
    }
    if (*render_command) {
      if (render.file.empty() && sample_option->count() == 0) {
        dyncp::core::throw_usage_error("render needs --sample or --file");
      }
      return run_render(render);
    }
    if (*prepare_command) return run_prepare(prepare);
    if (*inspect_command) return run_inspect(inspect);
    if (*bench_command) return run_bench_tokenizer(bench);
    return 0;
  });
}
