// dyncp-plan: run a packing scheduler on a lengths file or a synthetic length distribution and
// print the schedule with its modelled cost (table, or one JSON object per step with --json;
// schema in docs/packing.md). Exit codes: 0 ok, 2 bad usage or input, 1 internal failure.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "../cli_main.hpp"
#include "config/config_loader.hpp"
#include "config/length_distribution.hpp"
#include "config/model_architecture.hpp"
#include "core/error.hpp"
#include "core/version.hpp"
#include "lengths_file.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_model.hpp"
#include "plan_report.hpp"

namespace {

using namespace dyncp;

struct Options {
  std::string lengths_path;
  std::string distribution;
  std::uint64_t seed = 1234;
  std::int64_t dp = 1;
  std::int64_t cp = 1;
  std::int64_t tp = 1;
  bool sequence_parallel = false;
  std::int64_t cap = 0;
  std::int64_t min_cp = 1;
  std::string scheduler = "default_dynamic_cp";
  std::string alignment = "per_group";
  std::optional<std::int64_t> global_batch_size;
  std::int64_t steps = 1;
  std::string model_path;
  bool json = false;
  bool print_schedule = false;
  std::optional<double> device_tflops;
  std::optional<double> microbatch_overhead_ms;
  std::optional<std::int64_t> pp;   // pipeline stages (the cost model's bubble)
  std::optional<std::int64_t> vpp;  // virtual chunks per stage (interleaved 1F1B)
};

void warn(const std::string& message) {
  std::cerr << "dyncp-plan: warning: " << message << "\n";
}

// Rejects, with the file:line of the sample, what the scheduler would reject.
void check_lengths_fit(const Options& options, const packing::AlignmentRule& alignment,
                       const std::vector<std::int64_t>& lengths,
                       const std::vector<std::string>& origins) {
  const std::int64_t pool = options.dp * options.cp;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (options.scheduler == "dp_balanced") {
      const std::int64_t padded = alignment.padded(lengths[i], options.cp);
      if (padded > options.cp * options.cap) {
        core::throw_data_error(
            origins[i], "length " + std::to_string(padded) + " exceeds cp x cap = " +
                            std::to_string(options.cp * options.cap) + "; raise --cap or --cp");
      }
      continue;
    }
    const std::int64_t needed =
        packing::group_size_needed(lengths[i], options.cap, options.min_cp, alignment);
    if (needed > pool) {
      core::throw_data_error(origins[i], "length " + std::to_string(lengths[i]) +
                                             " needs a group of " + std::to_string(needed) +
                                             " ranks but the pool (dp x cp) has " +
                                             std::to_string(pool) + "; raise --cap or the pool");
    }
  }
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --model: an HF config.json (or its folder), or a recipe YAML whose model architecture and
// `packing` cost section are used; the cost options given on the command line win.
packing::CostModel make_cost_model(const Options& options) {
  config::ModelArchitecture architecture = packing::qwen3_30b_a3b_architecture();
  packing::CostModelParameters parameters;
  if (ends_with(options.model_path, ".yaml") || ends_with(options.model_path, ".yml")) {
    const auto recipe = config::load_config_file(options.model_path, {});
    architecture = recipe.model.architecture;
    parameters = packing::cost_model_parameters(recipe.packing, recipe.model);
  } else if (!options.model_path.empty()) {
    architecture = config::load_hf_model_config(options.model_path);
  }
  if (options.device_tflops) parameters.device_flops_per_second = *options.device_tflops * 1e12;
  // Under TP a pool rank is a TP group of tp devices sharing its work (TP's own collectives
  // are not modelled).
  parameters.device_flops_per_second *= static_cast<double>(options.tp);
  if (options.microbatch_overhead_ms) {
    parameters.microbatch_overhead_seconds = *options.microbatch_overhead_ms * 1e-3;
  }
  if (options.pp) parameters.pipeline_stages = *options.pp;
  if (options.vpp) parameters.pipeline_virtual_chunks = *options.vpp;
  if (parameters.pipeline_virtual_chunks > 1 && parameters.pipeline_stages == 1) {
    core::throw_usage_error("--vpp " + std::to_string(parameters.pipeline_virtual_chunks) +
                            ": virtual pipeline chunks need --pp > 1");
  }
  return packing::CostModel(packing::model_cost_from_architecture(architecture), parameters);
}

void check_scheduler_name(const std::string& scheduler) {
  const auto& names = plan::scheduler_names();
  if (std::find(names.begin(), names.end(), scheduler) == names.end()) {
    std::string known;
    for (const auto& name : names) known += (known.empty() ? "" : ", ") + name;
    core::throw_usage_error("--scheduler: unknown scheduler '" + scheduler +
                            "'; expected one of [" + known + "]");
  }
}

int run(const Options& options) {
  check_scheduler_name(options.scheduler);
  if (options.lengths_path.empty() == options.distribution.empty()) {
    core::throw_usage_error("give exactly one of --lengths FILE or --distribution SPEC");
  }
  if (options.cap < 1) {
    core::throw_usage_error(
        "--cap (max_seqlen_per_dp_cp_rank, tokens per rank per microbatch) "
        "is required and must be >= 1");
  }
  if (options.global_batch_size && *options.global_batch_size < 1) {
    core::throw_usage_error("--global-batch-size must be >= 1");
  }
  // The limits dyncp-train's keys have (config/key_builder.hpp), so a plan is never asked to
  // draw or schedule more than a real job could: every step's lengths are held at once.
  constexpr std::int64_t max_batch = std::int64_t{1} << 20;
  constexpr std::int64_t max_tokens = std::int64_t{1} << 24;
  constexpr std::int64_t max_lengths = std::int64_t{1} << 24;
  if (options.global_batch_size && *options.global_batch_size > max_batch) {
    core::throw_usage_error("--global-batch-size " + std::to_string(*options.global_batch_size) +
                            ": too large: must be at most " + std::to_string(max_batch) +
                            " (train.global_batch_size's limit)");
  }
  if (options.cap > max_tokens) {
    core::throw_usage_error("--cap " + std::to_string(options.cap) +
                            ": too large: must be at most " + std::to_string(max_tokens) +
                            " (model.max_seqlen_per_dp_cp_rank's limit)");
  }
  if (options.global_batch_size && options.steps * *options.global_batch_size > max_lengths) {
    core::throw_usage_error("--steps " + std::to_string(options.steps) + " x --global-batch-size " +
                            std::to_string(*options.global_batch_size) +
                            ": too many lengths: at most " + std::to_string(max_lengths) +
                            " in one plan");
  }
  if (!options.distribution.empty() && !options.global_batch_size) {
    core::throw_usage_error("--distribution needs --global-batch-size (samples per step)");
  }
  if (options.sequence_parallel && options.tp < 2) {
    core::throw_usage_error(
        "--sequence-parallel shards the sequence inside a TP group: it needs --tp 2 or more");
  }
  const bool dynamic = options.scheduler != "dp_balanced";
  const std::int64_t pool = options.dp * options.cp;
  if (pool > (std::int64_t{1} << 20)) {
    core::throw_usage_error("--dp x --cp = " + std::to_string(pool) +
                            ": pools above 2^20 ranks are not supported");
  }
  if (!packing::is_power_of_two(options.min_cp) || options.min_cp > pool) {
    core::throw_config_error(
        "--min-cp (min_dynamic_context_parallel_size)",
        std::to_string(options.min_cp) +
            ": must be a power of two no larger than dp x cp = " + std::to_string(pool));
  }
  if (dynamic && !packing::is_power_of_two(pool)) {
    warn("the pool dp x cp = " + std::to_string(pool) +
         " is not a power of two: Megatron's full-pool fallback will run (dyncp-train rejects "
         "this layout)");
  }
  if (options.alignment != "per_group" && options.alignment != "pool") {
    core::throw_usage_error("--alignment: unknown rule '" + options.alignment +
                            "'; expected one of [per_group, pool]");
  }
  const auto mode = options.alignment == "pool" ? config::PackingAlignment::pool
                                                : config::PackingAlignment::per_group;
  const packing::CostModel cost_model = make_cost_model(options);
  plan::PlanSettings settings{options.scheduler, options.dp, options.cp, options.cap,
                              options.min_cp};
  settings.tensor_parallel_size = options.tp;
  // Megatron's pool-wide multiple (also the cap that keeps synthetic lengths runnable by the
  // static layout under either rule); sequence parallelism multiplies it by tp.
  const std::int64_t multiple = packing::alignment_multiple(
      {options.dp, options.cp, dynamic, options.tp, options.sequence_parallel});
  // Lengths files under the pool rule are taken as given (already padded, so Megatron's
  // inputs replay exactly); otherwise lengths are real and padded for the group that runs
  // them. Static CP is compared with its own padding (2 x cp).
  const bool as_given = !options.lengths_path.empty() && mode == config::PackingAlignment::pool;
  settings.alignment =
      as_given
          ? packing::AlignmentRule{}
          : packing::alignment_rule(
                {options.dp, options.cp, dynamic, options.tp, options.sequence_parallel}, mode);
  settings.static_alignment =
      as_given ? packing::AlignmentRule{}
               : packing::alignment_rule(
                     {options.dp, options.cp, false, options.tp, options.sequence_parallel},
                     config::PackingAlignment::pool);

  std::vector<std::vector<std::int64_t>> batches;
  if (!options.lengths_path.empty()) {
    const plan::LengthsFile file = plan::read_lengths_file(options.lengths_path);
    check_lengths_fit(options, settings.alignment, file.lengths, file.origins);
    const auto unaligned = std::count_if(file.lengths.begin(), file.lengths.end(),
                                         [&](std::int64_t l) { return l % multiple != 0; });
    if (as_given && unaligned > 0) {
      warn(std::to_string(unaligned) + " of " + std::to_string(file.lengths.size()) +
           " lengths are not multiples of the alignment " + std::to_string(multiple) +
           " (scheduled as given; dyncp-train pads them)");
    }
    const auto total = static_cast<std::int64_t>(file.lengths.size());
    const std::int64_t batch = options.global_batch_size.value_or(total);
    if (options.steps * batch > total) {
      core::throw_usage_error("--steps " + std::to_string(options.steps) + " x batch of " +
                              std::to_string(batch) + " needs " +
                              std::to_string(options.steps * batch) + " lengths; " +
                              options.lengths_path + " has " + std::to_string(total));
    }
    for (std::int64_t step = 0; step < options.steps; ++step) {
      batches.emplace_back(file.lengths.begin() + step * batch,
                           file.lengths.begin() + (step + 1) * batch);
    }
  } else {
    const auto distribution =
        config::parse_length_distribution(options.distribution, "--distribution");
    // Real lengths, capped so that the static layout can run them under any padding rule
    // (at a multiple of 2 x dp x cp); the scheduler pads each for its group.
    const std::int64_t longest = options.cp * options.cap / multiple * multiple;
    if (longest < 1) {
      core::throw_usage_error("cp x cap = " + std::to_string(options.cp * options.cap) +
                              " is below the alignment multiple " + std::to_string(multiple) +
                              ": raise --cap");
    }
    for (std::int64_t step = 0; step < options.steps; ++step) {
      auto lengths =
          config::sample_lengths(distribution, static_cast<std::size_t>(*options.global_batch_size),
                                 options.seed, static_cast<std::uint64_t>(step));
      for (auto& length : lengths) length = std::min(length, longest);
      std::vector<std::string> origins;
      for (std::size_t i = 0; i < lengths.size(); ++i) {
        origins.push_back("step " + std::to_string(step) + " sample " + std::to_string(i));
      }
      check_lengths_fit(options, settings.alignment, lengths, origins);
      batches.push_back(std::move(lengths));
    }
  }

  plan::PlanSummary summary;
  for (std::size_t step = 0; step < batches.size(); ++step) {
    const auto plan = plan::plan_step(settings, std::move(batches[step]), cost_model,
                                      static_cast<std::int64_t>(step));
    summary.add(plan);
    if (options.json) {
      std::cout << plan::render_json(settings, plan) << "\n";
    } else {
      std::cout << plan::render_table(settings, plan, options.print_schedule);
    }
  }
  std::cout << (options.json ? summary.render_json() + "\n" : summary.render_table());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dyncp-plan: run a packing scheduler on sequence lengths and print the schedule, "
      "its statistics and its modelled step time"};
  Options options;
  app.add_option("--lengths", options.lengths_path,
                 "Lengths file: one length per line, or a JSON array / {\"lengths\": [...]}; "
                 "taken as given (no padding)");
  app.add_option("--distribution", options.distribution,
                 "Synthetic lengths: lognormal:mean=1024,sigma=1.5,min=128,max=8192 | "
                 "llama3_long | lmsys | trajectory:seq_length=32768 | uniform:min=..,max=.. | "
                 "equal:length=.. (see docs/packing.md)");
  app.add_option("--seed", options.seed, "Seed of the synthetic lengths");
  app.add_option("--dp", options.dp, "Data-parallel size")->check(CLI::Range(1, 1 << 20));
  app.add_option("--cp", options.cp, "Context-parallel size")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tp", options.tp,
                 "Tensor-parallel size: each pool rank is a TP group of tp devices (its compute "
                 "is shared by them; TP collectives are not modelled)")
      ->check(CLI::Range(1, 1 << 10));
  app.add_flag("--sequence-parallel", options.sequence_parallel,
               "Sequence parallelism: the alignment becomes 2c x tp on a group of c (pool rule "
               "2 x dp x cp x tp)");
  app.add_option("--cap", options.cap,
                 "max_seqlen_per_dp_cp_rank: tokens one rank may hold per microbatch");
  app.add_option("--min-cp", options.min_cp, "Smallest dynamic CP group (a power of two)");
  std::string scheduler_help;
  for (const auto& name : dyncp::plan::scheduler_names())
    scheduler_help += (scheduler_help.empty() ? "" : " | ") + name;
  app.add_option("--scheduler", options.scheduler, scheduler_help);
  app.add_option("--alignment", options.alignment,
                 "Padding: per_group (each sequence to 2c for its group of c ranks; default) | "
                 "pool (2 x dp x cp, Megatron-Core; a lengths file is then taken as given)");
  app.add_option("--global-batch-size", options.global_batch_size,
                 "Samples per step (a lengths file is cut into consecutive batches)");
  app.add_option("--steps", options.steps, "Number of steps")->check(CLI::Range(1, 1 << 20));
  app.add_option("--model", options.model_path,
                 "Cost model shape: an HF config.json, or a recipe YAML (its model and packing "
                 "sections); default Qwen3-30B-A3B");
  app.add_flag("--json", options.json, "One JSON object per step (schema: docs/packing.md)");
  app.add_flag("--print-schedule", options.print_schedule, "List every microbatch's groups");
  app.add_option("--device-tflops", options.device_tflops,
                 "Cost model: sustained TFLOP/s per rank (default 450)")
      ->check(CLI::PositiveNumber);
  app.add_option("--microbatch-overhead-ms", options.microbatch_overhead_ms,
                 "Cost model: fixed time per microbatch per rank (default 0.5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pp", options.pp,
                 "Pipeline stages: every stage runs 1/pp of each microbatch's layers in 1F1B "
                 "order, and the modelled step includes the bubble (default 1)")
      ->check(CLI::Range(1, 1 << 10));
  app.add_option("--vpp", options.vpp,
                 "Virtual chunks per stage (interleaved 1F1B; needs --pp > 1); a step's "
                 "microbatches are padded to a multiple of pp with empty ones")
      ->check(CLI::Range(1, 1 << 10));
  app.set_version_flag("--version", dyncp::core::version_string);

  return dyncp::apps::parse_and_run(app, argc, argv, "dyncp-plan", [&] { return run(options); });
}
