// The pipeline bubble measured on CPU ranks next to the modelled one (docs/benchmarks.md
// "Pipeline bubble"). One stage per rank (dp = cp = 1): a dense Qwen3-MoE-shaped model of
// --layers layers split evenly over the ranks (and --vpp virtual chunks), a batch of M sequences
// of --seq tokens, one per microbatch (static CP, capacity --seq), trained --steps steps after one
// warm-up step. The executor times every pass; the measured bubble is
//   1 - (time in passes, summed over the stages) / (stages x the longest stage's step),
// the median over the steps. Modelled: (pp - 1) / (v M + pp - 1), equal passes
// (packing::modelled_bubble_fraction). One JSON line on rank 0.
//
//   mpirun -np P bench_pipeline_bubble --microbatches M [--vpp V] [--layers 8] [--hidden 256]
//          [--seq 256] [--steps 5]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "data/sample.hpp"
#include "dist/mpi_comm.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "packing/pipeline_schedule.hpp"
#include "parallel/pipeline_stage.hpp"
#include "train/step_engine.hpp"

using namespace dyncp;

namespace {

// `count` sequences of `length` random token ids, loss on every next token.
class EqualSequences final : public data::SampleSource {
 public:
  EqualSequences(std::int64_t count, std::int64_t length, std::int64_t vocab)
      : count_(count), length_(length), vocab_(vocab) {}
  std::int64_t size() const override { return count_; }
  std::int64_t length(std::int64_t) const override { return length_; }
  data::Sample sample(std::int64_t index, std::int64_t alignment, std::int32_t pad) const override {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length_));
    core::Rng rng(5, core::RngPurpose::test, static_cast<std::uint64_t>(index));
    for (auto& token : tokens)
      token = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab_)));
    return data::make_sample(index, tokens, std::vector<std::uint8_t>(tokens.size(), 1), alignment,
                             pad);
  }

 private:
  std::int64_t count_, length_, vocab_;
};

struct Options {
  int vpp = 1;
  std::int64_t microbatches = 8, layers = 8, hidden = 256, seq = 256;
  int steps = 5;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::int64_t value = std::stoll(argv[i + 1]);
    if (key == "--vpp")
      options.vpp = static_cast<int>(value);
    else if (key == "--microbatches")
      options.microbatches = value;
    else if (key == "--layers")
      options.layers = value;
    else if (key == "--hidden")
      options.hidden = value;
    else if (key == "--seq")
      options.seq = value;
    else if (key == "--steps")
      options.steps = static_cast<int>(value);
    else
      throw std::runtime_error("unknown option " + key);
  }
  return options;
}

config::ModelArchitecture dense_architecture(const Options& options) {
  config::ModelArchitecture a;
  a.model_type = "qwen3_moe";
  a.vocab_size = 1024;
  a.hidden_size = options.hidden;
  a.intermediate_size = 4 * options.hidden;
  a.num_hidden_layers = options.layers;
  a.num_attention_heads = 8;
  a.num_key_value_heads = 4;
  a.head_dim = options.hidden / 8;
  a.num_experts = 4;
  a.num_experts_per_tok = 1;
  a.moe_intermediate_size = options.hidden;
  for (std::int64_t i = 0; i < options.layers; ++i) a.mlp_only_layers.push_back(i);
  a.rope_theta = 10000.0;
  a.resolve();
  return a;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime runtime(&argc, &argv);
  const Options options = parse(argc, argv);
  auto world = runtime.world();
  const int stages = world->size();
  const config::ModelArchitecture architecture = dense_architecture(options);
  const dist::ParallelLayout layout =
      dist::layout_for_world(stages, 1, 1, false, 1, {stages, options.vpp});
  dist::ParallelState parallel_state(*world, layout);
  config::PipelineSplitInput split_input;
  split_input.num_layers = options.layers;
  split_input.pipeline_size = stages;
  split_input.virtual_size = options.vpp;
  const config::PipelineSplit split = config::split_layers(split_input);
  model::ModelOptions model_options;
  if (stages > 1)
    model_options.part =
        parallel::stage_model_part(split, parallel_state.coordinates().pipeline_parallel_index);
  model::Qwen3MoeModel model(architecture, model_options);
  model.parameters().init_random(3);
  const EqualSequences source(options.microbatches, options.seq, architecture.vocab_size);
  train::StepEngineOptions engine_options;
  engine_options.scheduler = config::PackingScheduler::dp_balanced;
  engine_options.max_seqlen_per_dp_cp_rank = options.seq;
  engine_options.pipeline = split;
  train::StepEngine engine(model, parallel_state, source, engine_options);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(options.microbatches));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);

  engine.forward_backward(ids);  // warm-up: arenas, slots
  std::vector<double> bubbles, step_ms;
  std::vector<double> busy(static_cast<std::size_t>(stages), 0.0);  // per stage, over the steps
  double wall = 0.0;
  std::int64_t microbatches = 0;
  for (int step = 0; step < options.steps; ++step) {
    world->barrier();
    const auto start = std::chrono::steady_clock::now();
    const train::StepOutcome outcome = engine.forward_backward(ids);
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    bubbles.push_back(outcome.pipeline_bubble_fraction);
    microbatches = outcome.microbatches;
    std::vector<double> stage_busy(static_cast<std::size_t>(stages));
    world->all_gather(std::span<const double>(&outcome.pipeline_busy_ms, 1),
                      std::span<double>(stage_busy));
    for (std::size_t s = 0; s < busy.size(); ++s) busy[s] += stage_busy[s];
    wall += outcome.pipeline_wall_ms;
  }
  // Each stage's share of the step spent in passes (rank 0's step time as the reference).
  std::string shares;
  for (const double stage : busy)
    shares += (shares.empty() ? "" : ", ") + std::to_string(stage / wall).substr(0, 5);
  if (world->rank() == 0) {
    std::printf(
        "{\"pp\": %d, \"vpp\": %d, \"microbatches\": %lld, \"layers\": %lld, \"hidden\": %lld, "
        "\"seq\": %lld, \"steps\": %d, \"measured_bubble\": %.4f, \"measured_bubble_min\": %.4f, "
        "\"modelled_bubble\": %.4f, \"step_ms_median\": %.1f, \"stage_busy\": [%s]}\n",
        stages, options.vpp, static_cast<long long>(microbatches),
        static_cast<long long>(options.layers), static_cast<long long>(options.hidden),
        static_cast<long long>(options.seq), options.steps, median(bubbles),
        *std::min_element(bubbles.begin(), bubbles.end()),
        stages > 1 ? packing::modelled_bubble_fraction(stages, options.vpp, microbatches) : 0.0,
        median(step_ms), shares.c_str());
  }
  return 0;
}
