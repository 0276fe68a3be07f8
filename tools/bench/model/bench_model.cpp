// Tokens per second and model TFLOP/s of one forward + backward over packed bins, for a named
// model shape; prints one JSON line. Two uses:
//   - tools/bench/model/run_model_bench.sh: CPU, against HF transformers on the same bins;
//   - tools/bench/gpu_step.sh: Qwen3-30B-A3B-shaped layers on bins of 4,096 tokens drawn from
//     mock_varlen, with a per-phase breakdown, against same-run anchors.
//
//   bench_model --size tiny|small|qwen3-30b-a3b [--layers N] [--vocab N] [--bin-tokens N]
//               [--steps N] [--bins N] [--mock-varlen SPEC] [--recompute] [--device cpu|cuda]
//               [--write-batch FILE] [--write-config FILE] [--write-only]
//
// Bins: by default one bin of sequences drawn with core::Rng from seed 1 (lengths
// 64..bin/2, the last one filling the bin). With --mock-varlen SPEC, `--bins` bins are filled
// in order with samples of the mock_varlen dataset of that length distribution (seed 1234,
// a sample that does not fit closes the bin; the last bin is topped up with one filler
// sequence so every bin holds exactly --bin-tokens tokens). Each timed step runs every bin
// once. --write-batch writes the first bin's ids for the PyTorch side.
//
// Phases: the attention core and the expert computation are timed through the model's seams
// (the same code paths, wrapped); "other" is the rest (embedding, norms, projections, router,
// permutation, LM head and cross-entropy). FLOPs are Megatron's formula (packing::CostModel).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/mock_dataset.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "packing/cost_model.hpp"

namespace {

using namespace dyncp;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

config::ModelArchitecture architecture_of(const std::string& size) {
  if (size == "qwen3-30b-a3b") return packing::qwen3_30b_a3b_architecture();
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
    core::throw_usage_error("--size must be tiny, small or qwen3-30b-a3b, got '" + size + "'");
  }
  return a;
}

std::vector<std::int32_t> random_ids(core::Rng& rng, std::int64_t length, std::int64_t vocab) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return ids;
}

model::TokenSequences random_bin(std::int64_t bin_tokens, std::int64_t vocab) {
  core::Rng rng(1, core::RngPurpose::mock_data);
  model::TokenSequences sequences;
  std::int64_t remaining = bin_tokens;
  while (remaining > 0) {
    const std::int64_t longest = std::max<std::int64_t>(bin_tokens / 2, 65);
    std::int64_t length =
        64 + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(longest - 63)));
    if (remaining - length < 64) length = remaining;
    sequences.push_back(random_ids(rng, length, vocab));
    remaining -= length;
  }
  return sequences;
}

std::vector<model::TokenSequences> mock_varlen_bins(const std::string& spec,
                                                    std::int64_t bin_tokens, int bins,
                                                    std::int64_t vocab) {
  data::MockVarlenOptions options;
  options.distribution = spec;
  options.vocab_size = static_cast<std::int32_t>(vocab);
  const data::MockVarlenDataset dataset(options);
  core::Rng filler(2, core::RngPurpose::mock_data);
  std::vector<model::TokenSequences> result;
  std::int64_t next = 0;
  while (static_cast<int>(result.size()) < bins) {
    model::TokenSequences bin;
    std::int64_t used = 0;
    for (; next < dataset.size(); ++next) {
      const std::int64_t length = std::min(dataset.length(next), bin_tokens);
      if (used + length > bin_tokens) break;
      auto sample = dataset.sample(next, 1, 0);
      sample.tokens.resize(static_cast<std::size_t>(length));
      bin.push_back(std::move(sample.tokens));
      used += length;
    }
    if (used < bin_tokens) bin.push_back(random_ids(filler, bin_tokens - used, vocab));
    result.push_back(std::move(bin));
  }
  return result;
}

void write_batch_json(const std::string& path, const model::TokenSequences& sequences) {
  std::ofstream out(path);
  out << "{\"sequences\": [";
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    out << (s ? ", [" : "[");
    for (std::size_t j = 0; j < sequences[s].size(); ++j) out << (j ? ", " : "") << sequences[s][j];
    out << "]";
  }
  out << "]}\n";
}

// The local seams with wall-clock accounting around the attention core and the experts.
class TimedAttention final : public model::AttentionContext {
 public:
  double seconds = 0;
  void begin_bin(const model::SeamContext& c, const model::LocalBinLayout& layout) override {
    inner_.begin_bin(c, layout);
  }
  void forward(const model::SeamContext& c, int layer, const core::Tensor& q, const core::Tensor& k,
               const core::Tensor& v, double scale, const core::Tensor& out,
               ops::AttentionSaved& saved) override {
    const auto start = Clock::now();
    inner_.forward(c, layer, q, k, v, scale, out, saved);
    seconds += seconds_since(start);
  }
  void backward(const model::SeamContext& c, int layer, const core::Tensor& dout,
                const core::Tensor& q, const core::Tensor& k, const core::Tensor& v,
                const core::Tensor& out, const ops::AttentionSaved& saved, double scale,
                const core::Tensor& dq, const core::Tensor& dk, const core::Tensor& dv) override {
    const auto start = Clock::now();
    inner_.backward(c, layer, dout, q, k, v, out, saved, scale, dq, dk, dv);
    seconds += seconds_since(start);
  }

 private:
  model::LocalAttentionContext inner_;
};

class TimedExperts final : public model::ExpertDispatcher {
 public:
  double seconds = 0;
  void forward(const model::SeamContext& c, int layer, const core::Tensor& x_perm,
               const core::Tensor& offsets, const model::ExpertWeights& weights,
               const core::Tensor& y_perm, model::ExpertSaved& saved) override {
    const auto start = Clock::now();
    inner_.forward(c, layer, x_perm, offsets, weights, y_perm, saved);
    seconds += seconds_since(start);
  }
  void backward(const model::SeamContext& c, int layer, const core::Tensor& dy_perm,
                const core::Tensor& offsets, const model::ExpertWeights& weights,
                const model::ExpertSaved& saved, const core::Tensor& dx_perm) override {
    const auto start = Clock::now();
    inner_.backward(c, layer, dy_perm, offsets, weights, saved, dx_perm);
    seconds += seconds_since(start);
  }

 private:
  model::LocalExpertDispatcher inner_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Arguments {
  std::string size = "tiny", device = "cpu", mock_varlen, write_batch, write_config;
  std::int64_t bin_tokens = 2048, layers = 0, vocab = 0;
  int steps = 3, bins = 1;
  bool recompute = false;
  bool write_only = false;  // write the batch and config, run nothing (gpu_step.sh's HF anchor)
};

Arguments parse_arguments(int argc, char** argv) {
  Arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) core::throw_usage_error(arg + " needs a value");
      return std::string(argv[++i]);
    };
    const auto number = [&] {
      const auto text = value();
      try {
        return std::stoll(text);
      } catch (const std::exception&) {
        core::throw_usage_error(arg + " needs a number, got '" + text + "'");
      }
    };
    if (arg == "--size")
      a.size = value();
    else if (arg == "--device")
      a.device = value();
    else if (arg == "--layers")
      a.layers = number();
    else if (arg == "--vocab")
      a.vocab = number();
    else if (arg == "--bin-tokens")
      a.bin_tokens = number();
    else if (arg == "--steps")
      a.steps = static_cast<int>(number());
    else if (arg == "--bins")
      a.bins = static_cast<int>(number());
    else if (arg == "--mock-varlen")
      a.mock_varlen = value();
    else if (arg == "--recompute")
      a.recompute = true;
    else if (arg == "--write-batch")
      a.write_batch = value();
    else if (arg == "--write-config")
      a.write_config = value();
    else if (arg == "--write-only")
      a.write_only = true;
    else
      core::throw_usage_error("unknown argument '" + arg + "'");
  }
  if (a.steps < 1 || a.bins < 1 || a.bin_tokens < 2)
    core::throw_usage_error("--steps and --bins must be >= 1 and --bin-tokens >= 2");
  if (a.device != "cpu" && a.device != "cuda")
    core::throw_usage_error("--device must be cpu or cuda, got '" + a.device + "'");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto args = parse_arguments(argc, argv);
    auto architecture = architecture_of(args.size);
    if (args.layers > 0) architecture.num_hidden_layers = args.layers;
    if (args.vocab > 0) architecture.vocab_size = args.vocab;
    architecture.resolve();
    std::vector<model::TokenSequences> bins;
    if (args.mock_varlen.empty())
      bins.push_back(random_bin(args.bin_tokens, architecture.vocab_size));
    else
      bins =
          mock_varlen_bins(args.mock_varlen, args.bin_tokens, args.bins, architecture.vocab_size);
    if (!args.write_batch.empty()) write_batch_json(args.write_batch, bins.front());
    if (!args.write_config.empty())
      std::ofstream(args.write_config) << config::to_hf_config_json(architecture) << "\n";
    // The bins and config are written first: the anchors of gpu_step.sh need them either way.
    if (args.write_only) return 0;
    if (args.device == "cuda") {
      // The kernels are tested one by one (tests/gpu); the model step does not run on them
      // yet, so there is nothing honest to time here.
      core::throw_usage_error(
          "--device cuda: the model step does not run on CUDA in this build (only the CPU path "
          "is wired through the model); run with --device cpu");
    }

    model::ModelOptions options;
    options.recompute_full = args.recompute;
    model::Qwen3MoeModel model(architecture, options);
    model.parameters().init_random(1, 0.02);
    std::vector<model::OwnedPackedBin> packed;
    for (const auto& bin : bins) packed.push_back(model::pack_sequences(bin));
    const packing::CostModel cost(packing::model_cost_from_architecture(architecture), {});
    double step_flops = 0;
    std::size_t sequences = 0;
    for (const auto& bin : bins) {
      sequences += bin.size();
      for (const auto& sequence : bin)
        step_flops += cost.sequence_flops(static_cast<std::int64_t>(sequence.size()));
    }

    TimedAttention attention;
    TimedExperts experts;
    model::LocalSequenceStatisticsReducer statistics;
    const model::BinSeams seams{&attention, &experts, &statistics};
    model::BinOptions bin_options;
    bin_options.loss_grad_scale = 1.0 / static_cast<double>(args.bin_tokens);
    const auto run_step = [&] {
      for (const auto& bin : packed) model.run_bin(bin.bin, seams, bin_options);
    };
    run_step();  // warm-up: arenas reach their size
    std::vector<double> total, attention_s, experts_s;
    for (int step = 0; step < args.steps; ++step) {
      attention.seconds = experts.seconds = 0;
      const auto start = Clock::now();
      run_step();
      total.push_back(seconds_since(start));
      attention_s.push_back(attention.seconds);
      experts_s.push_back(experts.seconds);
    }
    const double step_s = median(total);
    const double step_tokens =
        static_cast<double>(args.bin_tokens) * static_cast<double>(bins.size());
    std::printf(
        "{\"impl\": \"dyncp\", \"device\": \"%s\", \"size\": \"%s\", \"layers\": %lld, "
        "\"bin_tokens\": %lld, \"bins\": %zu, \"sequences\": %zu, \"recompute\": %s, "
        "\"steps\": %d, \"median_s\": %.4f, \"min_s\": %.4f, \"tokens_per_s\": %.1f, "
        "\"model_tflops\": %.6g, \"flops_per_step\": %.6e, \"attention_s\": %.4f, "
        "\"experts_s\": %.4f, \"other_s\": %.4f}\n",
        args.device.c_str(), args.size.c_str(),
        static_cast<long long>(architecture.num_hidden_layers),
        static_cast<long long>(args.bin_tokens), bins.size(), sequences,
        args.recompute ? "true" : "false", args.steps, step_s,
        *std::min_element(total.begin(), total.end()), step_tokens / step_s,
        step_flops / step_s / 1e12, step_flops, median(attention_s), median(experts_s),
        std::max(0.0, step_s - median(attention_s) - median(experts_s)));
  } catch (const core::Error& error) {
    std::fprintf(stderr, "bench_model: %s\n", error.what());
    return error.exit_code();
  }
  return 0;
}
