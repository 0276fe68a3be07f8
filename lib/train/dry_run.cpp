#include "train/dry_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "data/sampler.hpp"
#include "dist/parallel_layout.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_model.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/run_scheduler.hpp"
#include "packing/schedule.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/checkpoint_estimate.hpp"
#include "train/memory_estimate.hpp"
#include "train/step_model_report.hpp"
#include "train/training_data.hpp"

namespace dyncp::train {

namespace {

std::string ratio(double numerator, double denominator) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2fx", numerator / denominator);
  return buffer;
}

}  // namespace

std::string milliseconds(double seconds) {
  // Plain decimals at any size (a long step is "12300 ms", never "1.23e+04 ms"), three
  // significant digits below 100 ms.
  const double ms = seconds * 1e3;
  const double size = std::fabs(ms);
  const int decimals = size >= 100 ? 0 : size >= 10 ? 1 : size >= 1 ? 2 : 3;
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f ms", decimals, ms);
  return buffer;
}

SchedulePreview preview_first_step(const config::ConfigContainer& config,
                                   const data::SampleSource& source) {
  const auto& model = config.model;
  // The plan, scheduler and cost model the trainer derives (parallel/parallel_plan.hpp,
  // train/run_options.hpp).
  const parallel::ParallelPlan plan =
      parallel::make_parallel_plan(config, static_cast<int>(config.layout.world_size), 0);
  const dist::ParallelLayout& layout = plan.layout;
  const config::PackingScheduler scheduler = plan.scheduler;
  const std::int64_t cap = plan.max_seqlen_per_dp_cp_rank;
  const packing::CostModel cost_model(packing::model_cost_from_architecture(model.architecture),
                                      packing::cost_model_parameters(config.packing, model));

  SchedulePreview preview;
  preview.scheduler = config::to_string(scheduler);
  preview.samples_in_source = source.size();
  preview.pool_size = layout.pool_size();

  const data::SamplerOptions sampler_options = train::sampler_options(config);
  data::Sampler sampler(sampler_options, source.size());
  const std::vector<std::int64_t> batch = sampler.next_global_batch();
  preview.batch_size = static_cast<std::int64_t>(batch.size());

  // Real lengths; each is padded for the group the schedule gives it.
  const packing::AlignmentRule& alignment = plan.alignment;
  std::vector<std::int64_t> lengths;
  lengths.reserve(batch.size());
  for (const std::int64_t id : batch) {
    lengths.push_back(source.length(id));
    preview.real_tokens += lengths.back();
  }

  packing::SchedulerInput input;
  input.lengths = lengths;
  input.alignment = alignment;
  input.data_parallel_size = layout.data_parallel_size;
  input.context_parallel_size = layout.context_parallel_size;
  input.max_seqlen_per_dp_cp_rank = cap;
  input.min_group_size = layout.min_dynamic_context_parallel_size;
  const packing::Schedule schedule = packing::run_scheduler(scheduler, input, cost_model);
  const bool fixed_groups = scheduler == config::PackingScheduler::dp_balanced;
  preview.check_problem = packing::check_schedule(
      schedule, lengths, cap,
      {fixed_groups ? layout.context_parallel_size : 0,
       fixed_groups ? 1 : layout.min_dynamic_context_parallel_size, alignment});
  preview.microbatches = schedule.num_microbatches();
  preview.groups = static_cast<std::int64_t>(schedule.groups.size());
  for (const auto& group : schedule.groups) {
    ++preview.group_sizes[group.size];
    for (const std::int64_t id : schedule.ids_of(group))
      preview.padded_tokens += alignment.padded(lengths[static_cast<std::size_t>(id)], group.size);
  }

  const packing::CostModel::StepTime step = cost_model.step_time(schedule, lengths, alignment);
  preview.step_seconds = step.step_seconds;
  preview.pipeline_bubble_fraction = step.pipeline_bubble_fraction;
  // Static CP as it would run: its own layout's padding (2 x cp).
  packing::SchedulerInput static_input = input;
  static_input.min_group_size = 1;
  static_input.alignment =
      packing::alignment_rule({layout.data_parallel_size, layout.context_parallel_size, false,
                               model.tensor_model_parallel_size, model.sequence_parallel},
                              config::PackingAlignment::pool);
  try {
    preview.static_cp_step_seconds =
        cost_model
            .step_time(packing::schedule_dp_balanced(static_input), lengths, static_input.alignment)
            .step_seconds;
  } catch (const core::Error&) {
    // A sequence longer than cp x cap: the static layout cannot run this batch at all.
  }
  preview.lower_bound_seconds = cost_model.tight_lower_bound_seconds(
      lengths, layout.pool_size(), cap, layout.min_dynamic_context_parallel_size, alignment);
  preview.schedule = schedule;
  preview.lengths = std::move(lengths);
  return preview;
}

std::string format_group_histogram(const std::map<std::int64_t, std::int64_t>& group_sizes) {
  std::string out;
  for (const auto& [size, count] : group_sizes) {
    if (!out.empty()) out += ' ';
    out += "cp" + std::to_string(size) + ":" + std::to_string(count);
  }
  return out;
}

std::string format_schedule_preview(const SchedulePreview& preview) {
  std::ostringstream out;
  const double padding =
      preview.padded_tokens > 0
          ? 100.0 * static_cast<double>(preview.padded_tokens - preview.real_tokens) /
                static_cast<double>(preview.padded_tokens)
          : 0.0;
  char padding_text[32];
  std::snprintf(padding_text, sizeof padding_text, "%.1f%%", padding);
  out << "schedule preview (first global batch, " << preview.scheduler << "):\n"
      << "  data:               " << preview.data << " (" << preview.samples_in_source
      << " samples)\n"
      << "  global batch:       " << preview.batch_size << " samples, " << preview.real_tokens
      << " real tokens, " << preview.padded_tokens << " padded (" << padding_text
      << " alignment padding)\n"
      << "  microbatches:       " << preview.microbatches << " on a pool of " << preview.pool_size
      << " ranks, " << preview.groups << " groups\n"
      << "  groups by CP size:  " << format_group_histogram(preview.group_sizes) << "\n"
      << "  schedule check:     "
      << (preview.check_problem.empty() ? "ok" : "FAILED: " + preview.check_problem) << "\n"
      << "  modelled step:      " << milliseconds(preview.step_seconds) << "\n";
  if (preview.pipeline_bubble_fraction > 0) {
    char bubble[64];
    std::snprintf(bubble, sizeof bubble, "%.1f%%", 100.0 * preview.pipeline_bubble_fraction);
    out << "  pipeline bubble:    " << bubble
        << " of the modelled step (every stage runs 1/pp of each microbatch in 1F1B order)\n";
  }
  out << "  static CP:          ";
  if (preview.static_cp_step_seconds >= 0) {
    out << milliseconds(preview.static_cp_step_seconds) << " (dp_balanced; "
        << ratio(preview.static_cp_step_seconds, preview.step_seconds) << " the modelled step)\n";
  } else {
    out << "cannot run this batch (a sequence exceeds cp x max_seqlen_per_dp_cp_rank)\n";
  }
  out << "  lower bound:        " << milliseconds(preview.lower_bound_seconds)
      << " (modelled step is " << ratio(preview.step_seconds, preview.lower_bound_seconds)
      << " the bound)\n";
  return out.str();
}

std::string suggest_static_layout(const config::ConfigContainer& config) {
  const auto& model = config.model;
  // One stage's ranks: every stage has its own dp x cp pool.
  const std::int64_t world = config.layout.world_size /
                             std::max<std::int64_t>(config.layout.pipeline_model_parallel_size, 1);
  const std::int64_t seq_length = model.seq_length;
  std::int64_t cap = model.max_seqlen_per_dp_cp_rank.value_or(seq_length);
  // The rules a static layout must pass (config/parallel_rules.cpp): cp divides the world,
  // dp = world / cp divides the global batch, cp x max_seqlen_per_dp_cp_rank >= seq_length.
  std::int64_t cp = 0;
  for (std::int64_t candidate = 1; candidate <= world; ++candidate) {
    if (world % candidate == 0 && config.train.global_batch_size % (world / candidate) == 0 &&
        candidate * cap >= seq_length) {
      cp = candidate;
      break;
    }
  }
  std::string overrides =
      "model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced";
  std::string why;
  if (cp == 0) {
    // Even cp = world cannot hold seq_length at this cap: every rank must hold more.
    cp = world;
    cap = (seq_length + world - 1) / world;
    overrides += " model.max_seqlen_per_dp_cp_rank=" + std::to_string(cap);
    why = "; no cp holds seq_length at the recipe's cap, so the cap grows";
  }
  overrides += " model.context_parallel_size=" + std::to_string(cp);
  return overrides + "   (dp " + std::to_string(world / cp) + " x cp " + std::to_string(cp) +
         ": the smallest cp with cp x " + std::to_string(cap) + " >= seq_length " +
         std::to_string(seq_length) + why + ")";
}

std::string format_pipeline_stage_memory(const config::ConfigContainer& config,
                                         std::int64_t microbatches, MemoryEstimateInput* largest,
                                         MemoryEstimate* largest_estimate) {
  const std::int64_t stages = config.layout.pipeline_model_parallel_size;
  const std::int64_t vpp = config.layout.virtual_pipeline_model_parallel_size;
  std::ostringstream out;
  out << "memory estimate per pipeline stage, per rank (" << stages << " stages"
      << (vpp > 1 ? ", " + std::to_string(vpp) + " virtual chunks each, interleaved 1F1B"
                  : std::string(", 1F1B"))
      << ": a stage keeps the activations of the microbatches in flight "
      << (vpp > 1 ? "(2 (pp - s - 1) + (v - 1) pp + 1 chunks)" : "(pp - s)")
      << (microbatches > 0 ? ", at most the first step's " + std::to_string(microbatches)
                           : std::string())
      << "):\n";
  double worst = -1;
  char line[256];
  for (std::int64_t stage = 0; stage < stages; ++stage) {
    const MemoryEstimateInput input = memory_estimate_input_for_stage(config, stage, microbatches);
    const MemoryEstimate estimate = estimate_memory(input);
    std::int64_t layers = 0;
    for (const auto& run : input.stage_layers) layers += run.second;
    std::snprintf(line, sizeof line,
                  "  stage %-3lld %3lld layers %12.1f MiB  (parameters and optimizer %.1f MiB, "
                  "activations and buffers %.1f MiB; %.2f microbatches in flight)\n",
                  static_cast<long long>(stage), static_cast<long long>(layers),
                  estimate.total_bytes() / (1024.0 * 1024.0),
                  estimate.parameter_state_bytes / (1024.0 * 1024.0),
                  estimate.per_bin_bytes / (1024.0 * 1024.0), input.pipeline_in_flight);
    out << line;
    if (estimate.total_bytes() > worst) {
      worst = estimate.total_bytes();
      if (largest != nullptr) *largest = input;
      if (largest_estimate != nullptr) *largest_estimate = estimate;
    }
  }
  return out.str();
}

bool write_dry_run_report(std::ostream& out, const config::ConfigContainer& config,
                          std::int64_t max_records) {
  bool valid = true;
  const parallel::ParallelPlan plan =
      parallel::make_parallel_plan(config, static_cast<int>(config.layout.world_size), 0);
  out << "layout: " << parallel::summarize_parallel_plan(plan) << "\n"
      << dist::format_layout(plan.layout)
      << parallel::describe_rank_groups(plan, config.model.architecture.num_experts);
  if (plan.layout.tensor_model_parallel_size > 1) {
    out << "note: the modelled step times below are those of tp 1: the cost and step models do "
           "not price TP's split of the work or its collectives (dyncp-plan --tp scales the "
           "compute); the schedule, its padding and the memory estimate are TP's\n";
  }
  TrainingData data = open_preview_data(config, max_records);
  SchedulePreview preview;
  if (data.source) {
    preview = preview_first_step(config, *data.source);
    preview.data = data.description;
    out << format_schedule_preview(preview);
    valid = preview.check_problem.empty();
  } else {
    out << "schedule preview: skipped: " << data.description << "\n";
  }
  if (config.model.dynamic_context_parallel)
    out << "static-CP baseline of this recipe: " << suggest_static_layout(config) << "\n";
  MemoryEstimateInput input = memory_estimate_input(config);
  MemoryEstimate estimate = estimate_memory(input);
  const std::int64_t stages = config.layout.pipeline_model_parallel_size;
  if (stages > 1) {
    // Every stage's ranks hold other layers: the table is the largest stage's, the list all.
    out << format_pipeline_stage_memory(config, preview.microbatches, &input, &estimate);
  }
  out << (stages > 1 ? "memory estimate of the largest stage, per rank ("
                     : "memory estimate per rank (")
      << (input.bf16_products ? std::string("bf16_mixed: fp32 master weights, main_grad and "
                                            "activations, bf16 operand copies") +
                                    (input.on_gpu ? " on the GPU" : " held as fp32 on the CPU")
                              : std::string("fp32"))
      << "; " << input.tokens_per_rank << " tokens per rank; "
      << (input.tensor_model_parallel_size > 1
              ? "TP " + std::to_string(input.tensor_model_parallel_size) +
                    " divides heads, FFN columns, vocabulary and their weights" +
                    (input.sequence_parallel ? " and the residual stream (SP)" : "") +
                    ", experts over etp " + std::to_string(input.expert_tensor_parallel_size) + "; "
              : std::string())
      << (input.recompute_full ? "recompute full"
          : config.model.recompute_granularity == config::RecomputeGranularity::selective
              ? "recompute selective"
              : "no recompute")
      << "):\n"
      << format_memory_table(estimate);
  if (config.dist.device == config::Device::cpu) {
    // CPU runs usually put every rank on one machine: they share its memory.
    out << memory_fit_line(estimate, config.layout.world_size, host_memory_bytes(),
                           "host memory (every rank on this machine)");
  } else {
    out << memory_fit_line(estimate, 1, 0, "a dry run does not query GPU memory");
  }
  if (stages > 1)
    out << "note: the modelled GPU step below is the whole model's on one pool (pp 1); the "
           "schedule preview's modelled step is the pipelined one\n";
  out << format_step_model_report(config, data.source ? &preview.schedule : nullptr,
                                  preview.lengths);
  out << format_checkpoint_estimate(estimate_checkpoint(config),
                                    config.checkpoint.sharded || config.checkpoint.async_save);
  return valid;
}

}  // namespace dyncp::train
