#include "parallel/parallel_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace dyncp::parallel {

int ParallelPlan::largest_cp_group() const {
  return layout.dynamic_context_parallel ? layout.pool_size() : layout.context_parallel_size;
}

std::int64_t ParallelPlan::largest_group_tokens() const {
  return static_cast<std::int64_t>(largest_cp_group()) * max_seqlen_per_dp_cp_rank;
}

std::int64_t ParallelPlan::largest_group_multiple() const {
  return alignment.multiple(largest_cp_group());
}

model::ExpertRange expert_range_of(std::int64_t num_experts, int expert_parallel_size,
                                   int expert_parallel_index) {
  if (expert_parallel_size < 1 || num_experts % expert_parallel_size != 0) {
    core::throw_config_error("model.expert_model_parallel_size",
                             std::to_string(expert_parallel_size) + ": must divide num_experts (" +
                                 std::to_string(num_experts) + ")");
  }
  const std::int64_t count = num_experts / expert_parallel_size;
  return {expert_parallel_index * count, count};
}

ParallelPlan make_parallel_plan(const config::ConfigContainer& config, int world_size, int rank) {
  const auto& model = config.model;
  ParallelPlan plan;
  plan.world_size = world_size;
  plan.rank = rank;
  plan.layout = dist::layout_for_world(
      world_size, static_cast<int>(model.context_parallel_size),
      static_cast<int>(model.expert_model_parallel_size), model.dynamic_context_parallel,
      static_cast<int>(model.min_dynamic_context_parallel_size),
      {static_cast<int>(model.pipeline_model_parallel_size),
       static_cast<int>(model.virtual_pipeline_model_parallel_size.value_or(1))},
      {static_cast<int>(model.tensor_model_parallel_size),
       static_cast<int>(
           model.expert_tensor_parallel_size.value_or(model.tensor_model_parallel_size))});
  plan.pipeline = config::split_layers(config::pipeline_split_input(model));
  plan.coordinates = dist::coordinates_of(plan.layout, rank);
  plan.scheduler = model.sequence_packing_scheduler.value_or(
      plan.layout.dynamic_context_parallel ? config::PackingScheduler::default_dynamic_cp
                                           : config::PackingScheduler::dp_balanced);
  plan.max_seqlen_per_dp_cp_rank = model.max_seqlen_per_dp_cp_rank.value_or(model.seq_length);
  plan.alignment = packing::alignment_rule(config);
  plan.experts =
      expert_range_of(model.architecture.num_experts, plan.layout.expert_model_parallel_size,
                      plan.coordinates.expert_parallel_index);
  return plan;
}

std::string summarize_parallel_plan(const ParallelPlan& plan) {
  const dist::ParallelLayout& layout = plan.layout;
  const std::int64_t sp_factor = plan.alignment.sequence_parallel_factor;
  const std::string alignment =
      layout.dynamic_context_parallel && plan.alignment.per_group()
          ? (sp_factor > 1 ? fmt::format("per group (2 x group size x tp {})", sp_factor)
                           : std::string("per group (2 x group size)"))
          : "multiple " + std::to_string(plan.alignment.multiple(layout.context_parallel_size));
  const int tp = layout.tensor_model_parallel_size;
  const std::string pipeline =
      layout.pipeline_model_parallel_size > 1
          ? fmt::format("pp {} (vpp {}) x ", layout.pipeline_model_parallel_size,
                        layout.virtual_pipeline_model_parallel_size)
          : std::string();
  const std::string tensor_part =
      tp == 1 ? std::string()
              : fmt::format("tp {}{} x ", tp, sp_factor > 1 ? " (sequence parallel)" : "");
  const std::string expert_part =
      tp == 1 ? std::string() : fmt::format(" (etp {})", layout.expert_tensor_parallel_size);
  return fmt::format("world {} = {}{}dp {} x cp {}, ep {}{}, {} CP, alignment {}", plan.world_size,
                     pipeline, tensor_part, layout.data_parallel_size, layout.context_parallel_size,
                     layout.expert_model_parallel_size, expert_part,
                     layout.dynamic_context_parallel ? "dynamic" : "static", alignment);
}

std::string describe_rank_groups(const ParallelPlan& plan, std::int64_t num_experts) {
  const dist::RankCoordinates& at = plan.coordinates;
  const bool tensor_parallel = plan.layout.tensor_model_parallel_size > 1;
  const std::string tensor_part =
      tensor_parallel
          ? fmt::format("tp index {}, pool rank {}, ", at.tensor_parallel_index, at.pool_rank)
          : std::string();
  std::string text = fmt::format(
      "groups of rank {} ({}dp index {}, cp index {}, ep index {}, expert-dp index {}):\n",
      plan.rank, tensor_part, at.data_parallel_index, at.context_parallel_index,
      at.expert_parallel_index, at.expert_data_parallel_index);
  for (const dist::GroupAxis axis : dist::all_group_axes) {
    const bool tensor_axis =
        axis == dist::GroupAxis::tensor_parallel || axis == dist::GroupAxis::expert_tensor_parallel;
    if (tensor_axis && !tensor_parallel) continue;
    text += fmt::format("  {:<26}{}\n", std::string(dist::group_axis_name(axis)) + ":",
                        plan.group(axis).to_string());
  }
  for (const int size : dist::dynamic_cp_group_sizes(plan.layout)) {
    text += fmt::format("  {:<26}{}\n", fmt::format("dynamic CP size {}:", size),
                        dist::dynamic_cp_group_of(plan.layout, size, plan.rank).to_string());
  }
  if (num_experts > 0) {
    const int etp = plan.layout.expert_tensor_parallel_size;
    text += fmt::format("  {:<26}[{}, {}) of {}{}\n", "experts:", plan.experts.first,
                        plan.experts.first + plan.experts.count, num_experts,
                        etp > 1 ? fmt::format(", FFN column shard {} of {} of each",
                                              at.expert_tensor_parallel_index, etp)
                                : std::string());
  }
  if (plan.layout.pipeline_model_parallel_size > 1) {
    text += fmt::format("  {:<26}{} (stage {} of {})\n", "pipeline_parallel:",
                        dist::pipeline_group_of(plan.layout, plan.rank).to_string(),
                        at.pipeline_parallel_index, plan.layout.pipeline_model_parallel_size);
  }
  return text;
}

}  // namespace dyncp::parallel
