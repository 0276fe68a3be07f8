// Tokens per second of one forward + backward over a packed bin on CPU, for a named model
// size; prints one JSON line. Run through tools/bench/model/run_model_bench.sh, which also times
// HF transformers on the same bins with the same thread count.
//
//   bench_model --size tiny|small [--bin-tokens N] [--steps N] [--recompute]
//
// Sequences of the bin are drawn with core::Rng from seed 1 (lengths 64..bin/2, the last one
// filling the bin); the same lengths and ids are written with --write-batch for the PyTorch run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"

namespace {

using namespace dyncp;

config::ModelArchitecture architecture_of(const std::string& size) {
  config::ModelArchitecture a;
  a.model_type = "qwen3_moe";
  a.num_key_value_heads = 2;
  a.rope_theta = 10000.0;
  a.norm_topk_prob = true;
  a.decoder_sparse_step = 1;
  if (size == "tiny") {  // qwen-moe.md §8 config A
    a.vocab_size = 512;
    a.hidden_size = 64;
    a.num_hidden_layers = 3;
    a.num_attention_heads = 4;
    a.head_dim = 24;
    a.intermediate_size = 96;
    a.moe_intermediate_size = 48;
    a.num_experts = 8;
    a.num_experts_per_tok = 2;
    a.mlp_only_layers = {0};
  } else if (size == "small") {
    a.vocab_size = 32000;
    a.hidden_size = 512;
    a.num_hidden_layers = 8;
    a.num_attention_heads = 8;
    a.head_dim = 64;
    a.intermediate_size = 1536;
    a.moe_intermediate_size = 384;
    a.num_experts = 16;
    a.num_experts_per_tok = 2;
  } else {
    core::throw_usage_error("--size must be tiny or small, got '" + size + "'");
  }
  a.resolve();
  return a;
}

model::TokenSequences make_sequences(std::int64_t bin_tokens, std::int64_t vocab) {
  core::Rng rng(1, core::RngPurpose::mock_data);
  model::TokenSequences sequences;
  std::int64_t remaining = bin_tokens;
  while (remaining > 0) {
    const std::int64_t longest = std::max<std::int64_t>(bin_tokens / 2, 65);
    std::int64_t length =
        64 + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(longest - 63)));
    if (remaining - length < 64) length = remaining;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
    for (auto& id : ids)
      id = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
    sequences.push_back(std::move(ids));
    remaining -= length;
  }
  return sequences;
}

}  // namespace

int main(int argc, char** argv) {
  std::string size = "tiny", write_batch, write_config;
  std::int64_t bin_tokens = 2048;
  int steps = 3;
  bool recompute = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (arg == "--size")
      size = value();
    else if (arg == "--bin-tokens")
      bin_tokens = std::stoll(value());
    else if (arg == "--steps")
      steps = std::stoi(value());
    else if (arg == "--recompute")
      recompute = true;
    else if (arg == "--write-batch")
      write_batch = value();
    else if (arg == "--write-config")
      write_config = value();
    else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  try {
    const auto architecture = architecture_of(size);
    const auto sequences = make_sequences(bin_tokens, architecture.vocab_size);
    if (!write_batch.empty()) {
      std::ofstream out(write_batch);
      out << "{\"sequences\": [";
      for (std::size_t s = 0; s < sequences.size(); ++s) {
        out << (s ? ", [" : "[");
        for (std::size_t j = 0; j < sequences[s].size(); ++j)
          out << (j ? ", " : "") << sequences[s][j];
        out << "]";
      }
      out << "]}\n";
    }
    if (!write_config.empty())
      std::ofstream(write_config) << config::to_hf_config_json(architecture) << "\n";
    model::ModelOptions options;
    options.recompute_full = recompute;
    model::Qwen3MoeModel model(architecture, options);
    model.parameters().init_random(1, 0.02);
    const auto packed = model::pack_sequences(sequences);
    model::LocalSeams seams;
    model::BinOptions bin_options;
    bin_options.loss_grad_scale = 1.0 / static_cast<double>(bin_tokens);
    model.run_bin(packed.bin, seams.seams(), bin_options);  // warm-up: arenas reach their size
    std::vector<double> seconds;
    for (int step = 0; step < steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      model.run_bin(packed.bin, seams.seams(), bin_options);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf(
        "{\"impl\": \"dyncp\", \"size\": \"%s\", \"bin_tokens\": %lld, \"sequences\": %zu, "
        "\"recompute\": %s, \"steps\": %d, \"median_s\": %.4f, \"min_s\": %.4f, "
        "\"tokens_per_s\": %.1f}\n",
        size.c_str(), static_cast<long long>(bin_tokens), sequences.size(),
        recompute ? "true" : "false", steps, median, seconds.front(),
        static_cast<double>(bin_tokens) / median);
  } catch (const core::Error& error) {
    std::fprintf(stderr, "bench_model: %s\n", error.what());
    return error.exit_code();
  }
  return 0;
}
