#include "dist/parallel_layout.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace dyncp::dist {

namespace {

bool is_power_of_two(int value) {
  return value > 0 && (value & (value - 1)) == 0;
}

void check_rank(const ParallelLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.world_size()) {
    if (layout.pipeline_model_parallel_size == 1) {
      core::throw_runtime_error(
          fmt::format("rank {} is outside the pool of {} ranks (dp {} x cp {})", rank,
                      layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size));
    }
    core::throw_runtime_error(
        fmt::format("rank {} is outside the world of {} ranks (pp {} x dp {} x cp {})", rank,
                    layout.world_size(), layout.pipeline_model_parallel_size,
                    layout.data_parallel_size, layout.context_parallel_size));
  }
}

// A group of stage 0's pool moved to `stage`: its ranks and its color shift by whole pools.
RankGroup on_stage(const ParallelLayout& layout, RankGroup group, int stage, int groups_per_stage) {
  group.first_rank += stage * layout.pool_size();
  group.index += stage * groups_per_stage;
  return group;
}

}  // namespace

std::vector<std::string> layout_problems(const ParallelLayout& layout) {
  std::vector<std::string> problems;
  const int dp = layout.data_parallel_size;
  const int cp = layout.context_parallel_size;
  const int ep = layout.expert_model_parallel_size;
  if (dp < 1) problems.push_back(fmt::format("dist.data_parallel_size: {}: must be >= 1", dp));
  if (cp < 1) problems.push_back(fmt::format("model.context_parallel_size: {}: must be >= 1", cp));
  if (ep < 1) {
    problems.push_back(fmt::format("model.expert_model_parallel_size: {}: must be >= 1", ep));
  }
  const int pp = layout.pipeline_model_parallel_size;
  const int vpp = layout.virtual_pipeline_model_parallel_size;
  if (pp < 1) {
    problems.push_back(fmt::format("model.pipeline_model_parallel_size: {}: must be >= 1", pp));
  }
  if (vpp < 1 || (vpp > 1 && pp == 1)) {
    problems.push_back(fmt::format(
        "model.virtual_pipeline_model_parallel_size: {}: must be >= 1, and > 1 only with "
        "model.pipeline_model_parallel_size > 1",
        vpp));
  }
  if (!problems.empty()) return problems;
  const int pool = layout.pool_size();
  if (pool % ep != 0) {
    problems.push_back(fmt::format(
        "model.expert_model_parallel_size: {}: must divide the pool of data_parallel_size ({}) x "
        "context_parallel_size ({}) = {} ranks",
        ep, dp, cp, pool));
  }
  if (layout.dynamic_context_parallel) {
    if (!is_power_of_two(pool) || pool < 2) {
      problems.push_back(fmt::format(
          "model.dynamic_context_parallel: true: needs a pool of data_parallel_size ({}) x "
          "context_parallel_size ({}) = {} ranks that is a power of two and at least 2",
          dp, cp, pool));
    }
    const int min_size = layout.min_dynamic_context_parallel_size;
    if (!is_power_of_two(min_size) || min_size > pool) {
      problems.push_back(fmt::format(
          "model.min_dynamic_context_parallel_size: {}: must be a power of two in [1, {}] (the "
          "pool size)",
          min_size, pool));
    }
  }
  return problems;
}

void validate_layout(const ParallelLayout& layout) {
  const auto problems = layout_problems(layout);
  if (problems.empty()) return;
  std::string message = fmt::format("invalid parallel layout ({} problem{}):", problems.size(),
                                    problems.size() == 1 ? "" : "s");
  for (const auto& problem : problems) message += "\n  " + problem;
  core::throw_config_error("model", message);
}

ParallelLayout layout_for_world(int world_size, int context_parallel_size,
                                int expert_model_parallel_size, bool dynamic_context_parallel,
                                int min_dynamic_context_parallel_size, PipelineSizes pipeline) {
  if (pipeline.stages < 1 || world_size % pipeline.stages != 0) {
    core::throw_config_error(
        "model.pipeline_model_parallel_size",
        fmt::format("{}: must be >= 1 and divide the world of {} ranks (world = "
                    "pipeline_model_parallel_size x data_parallel_size x context_parallel_size)",
                    pipeline.stages, world_size));
  }
  const int stage_ranks = world_size / pipeline.stages;
  if (context_parallel_size < 1 || stage_ranks % context_parallel_size != 0) {
    core::throw_config_error(
        "model.context_parallel_size",
        pipeline.stages == 1
            ? fmt::format("{}: must be >= 1 and divide the world of {} ranks (TP = PP = 1, so "
                          "world = data_parallel_size x context_parallel_size)",
                          context_parallel_size, world_size)
            : fmt::format("{}: must be >= 1 and divide the {} ranks of a pipeline stage (TP = 1, "
                          "so world = pipeline_model_parallel_size ({}) x data_parallel_size x "
                          "context_parallel_size)",
                          context_parallel_size, stage_ranks, pipeline.stages));
  }
  ParallelLayout layout;
  layout.pipeline_model_parallel_size = pipeline.stages;
  layout.virtual_pipeline_model_parallel_size = pipeline.virtual_chunks;
  layout.data_parallel_size = stage_ranks / context_parallel_size;
  layout.context_parallel_size = context_parallel_size;
  layout.expert_model_parallel_size = expert_model_parallel_size;
  layout.dynamic_context_parallel = dynamic_context_parallel;
  layout.min_dynamic_context_parallel_size = min_dynamic_context_parallel_size;
  validate_layout(layout);
  return layout;
}

const char* group_axis_name(GroupAxis axis) {
  switch (axis) {
    case GroupAxis::context_parallel:
      return "context_parallel";
    case GroupAxis::data_parallel:
      return "data_parallel";
    case GroupAxis::pool:
      return "pool";
    case GroupAxis::expert_parallel:
      return "expert_parallel";
    case GroupAxis::expert_data_parallel:
      return "expert_data_parallel";
  }
  return "?";
}

bool RankGroup::contains(int rank) const {
  return position_of(rank) >= 0;
}

int RankGroup::position_of(int rank) const {
  const int offset = rank - first_rank;
  if (offset < 0 || offset % stride != 0 || offset / stride >= size) return -1;
  return offset / stride;
}

std::vector<int> RankGroup::ranks() const {
  std::vector<int> members(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<std::size_t>(i)] = rank_at(i);
  return members;
}

std::string RankGroup::to_string() const {
  constexpr int shown_in_full = 8;
  if (size <= shown_in_full) return fmt::format("[{}]", fmt::join(ranks(), ", "));
  return fmt::format("[{}, {}, {}, ..., {}] ({} ranks)", rank_at(0), rank_at(1), rank_at(2),
                     rank_at(size - 1), size);
}

RankCoordinates coordinates_of(const ParallelLayout& layout, int rank) {
  check_rank(layout, rank);
  const int cp = layout.context_parallel_size;
  const int ep = layout.expert_model_parallel_size;
  const int pool = layout.pool_size();
  const int r = rank % pool;
  return RankCoordinates{r / cp, r % cp, r % ep, r / ep, rank / pool, r};
}

RankGroup pipeline_group_of(const ParallelLayout& layout, int rank) {
  const RankCoordinates where = coordinates_of(layout, rank);
  return RankGroup{where.pool_rank, layout.pool_size(), layout.pipeline_model_parallel_size,
                   where.pool_rank};
}

namespace {

RankGroup group_in_stage(const ParallelLayout& layout, GroupAxis axis,
                         const RankCoordinates& where) {
  const int dp = layout.data_parallel_size;
  const int cp = layout.context_parallel_size;
  const int ep = layout.expert_model_parallel_size;
  const int pool = layout.pool_size();
  switch (axis) {
    case GroupAxis::context_parallel:
      return RankGroup{where.data_parallel_index * cp, 1, cp, where.data_parallel_index};
    case GroupAxis::data_parallel:
      return RankGroup{where.context_parallel_index, cp, dp, where.context_parallel_index};
    case GroupAxis::pool:
      return RankGroup{0, 1, pool, 0};
    case GroupAxis::expert_parallel:
      return RankGroup{where.expert_data_parallel_index * ep, 1, ep,
                       where.expert_data_parallel_index};
    case GroupAxis::expert_data_parallel:
      return RankGroup{where.expert_parallel_index, ep, pool / ep, where.expert_parallel_index};
  }
  core::throw_runtime_error("unknown group axis");
}

}  // namespace

RankGroup group_of(const ParallelLayout& layout, GroupAxis axis, int rank) {
  const RankCoordinates where = coordinates_of(layout, rank);
  return on_stage(layout, group_in_stage(layout, axis, where), where.pipeline_parallel_index,
                  num_groups(layout, axis));
}

int num_groups(const ParallelLayout& layout, GroupAxis axis) {
  switch (axis) {
    case GroupAxis::context_parallel:
      return layout.data_parallel_size;
    case GroupAxis::data_parallel:
      return layout.context_parallel_size;
    case GroupAxis::pool:
      return 1;
    case GroupAxis::expert_parallel:
      return layout.pool_size() / layout.expert_model_parallel_size;
    case GroupAxis::expert_data_parallel:
      return layout.expert_model_parallel_size;
  }
  return 0;
}

std::vector<int> dynamic_cp_group_sizes(const ParallelLayout& layout) {
  std::vector<int> sizes;
  if (!layout.dynamic_context_parallel) return sizes;
  for (int size = layout.min_dynamic_context_parallel_size; size <= layout.pool_size(); size *= 2) {
    sizes.push_back(size);
  }
  return sizes;
}

bool is_dynamic_cp_group_size(const ParallelLayout& layout, int size) {
  return layout.dynamic_context_parallel && is_power_of_two(size) &&
         size >= layout.min_dynamic_context_parallel_size && size <= layout.pool_size();
}

RankGroup dynamic_cp_group_of(const ParallelLayout& layout, int size, int rank) {
  check_rank(layout, rank);
  if (!is_dynamic_cp_group_size(layout, size)) {
    core::throw_runtime_error(fmt::format(
        "no dynamic CP group of size {}: dynamic_context_parallel is {}, sizes are the powers of "
        "two from min_dynamic_context_parallel_size ({}) to the pool size ({})",
        size, layout.dynamic_context_parallel, layout.min_dynamic_context_parallel_size,
        layout.pool_size()));
  }
  const RankCoordinates where = coordinates_of(layout, rank);
  const int r = where.pool_rank;
  return on_stage(layout, RankGroup{r - r % size, 1, size, r / size}, where.pipeline_parallel_index,
                  layout.pool_size() / size);
}

std::string format_layout(const ParallelLayout& layout, int max_groups_listed) {
  std::string text = fmt::format(
      "parallel layout: world {} = data_parallel {} x context_parallel {} (TP = PP = 1, CP "
      "fastest: rank = dp_index * {} + cp_index); expert_parallel {} x expert_data_parallel {}\n",
      layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size,
      layout.context_parallel_size, layout.expert_model_parallel_size,
      layout.pool_size() / layout.expert_model_parallel_size);
  if (layout.pipeline_model_parallel_size > 1) {
    text = fmt::format(
        "parallel layout: world {} = pipeline {} x data_parallel {} x context_parallel {} (TP = "
        "1; stage slowest, CP fastest: rank = stage * {} + dp_index * {} + cp_index); "
        "{} virtual chunk(s) per stage; each stage's pool: expert_parallel {} x "
        "expert_data_parallel {}; the groups of stage 0 (stage s: + s * {})\n",
        layout.world_size(), layout.pipeline_model_parallel_size, layout.data_parallel_size,
        layout.context_parallel_size, layout.pool_size(), layout.context_parallel_size,
        layout.virtual_pipeline_model_parallel_size, layout.expert_model_parallel_size,
        layout.pool_size() / layout.expert_model_parallel_size, layout.pool_size());
    text += fmt::format("  pipeline_parallel ({} groups): {} ...\n", layout.pool_size(),
                        pipeline_group_of(layout, 0).to_string());
  }
  auto list_groups = [&](const std::string& label, int count, auto group_at) {
    text += fmt::format("  {} ({} group{}):", label, count, count == 1 ? "" : "s");
    for (int g = 0; g < count && g < max_groups_listed; ++g) text += " " + group_at(g).to_string();
    if (count > max_groups_listed) text += fmt::format(" ... ({} more)", count - max_groups_listed);
    text += "\n";
  };
  for (const GroupAxis axis : all_group_axes) {
    // A representative rank of group g, by axis: the groups are numbered by these ranks.
    const auto group_at = [&](int g) {
      switch (axis) {
        case GroupAxis::context_parallel:
          return group_of(layout, axis, g * layout.context_parallel_size);
        case GroupAxis::expert_parallel:
          return group_of(layout, axis, g * layout.expert_model_parallel_size);
        default:
          return group_of(layout, axis, g);
      }
    };
    list_groups(group_axis_name(axis), num_groups(layout, axis), group_at);
  }
  if (!layout.dynamic_context_parallel) {
    text += "  dynamic CP: off\n";
    return text;
  }
  text +=
      fmt::format("  dynamic CP: sizes {} (a group is created the first time its size is used)\n",
                  fmt::join(dynamic_cp_group_sizes(layout), ", "));
  for (const int size : dynamic_cp_group_sizes(layout)) {
    list_groups(fmt::format("dynamic CP size {}", size), layout.pool_size() / size,
                [&](int g) { return dynamic_cp_group_of(layout, size, g * size); });
  }
  return text;
}

}  // namespace dyncp::dist
