#include "dist/parallel_layout.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::dist {

namespace {

bool is_power_of_two(int value) {
  return value > 0 && (value & (value - 1)) == 0;
}

void check_rank(const ParallelLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.world_size()) {
    if (layout.tensor_model_parallel_size == 1 && layout.pipeline_model_parallel_size == 1) {
      core::throw_runtime_error(
          fmt::format("rank {} is outside the pool of {} ranks (dp {} x cp {})", rank,
                      layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size));
    }
    const int pp = layout.pipeline_model_parallel_size;
    const int tp = layout.tensor_model_parallel_size;
    core::throw_runtime_error(fmt::format(
        "rank {} is outside the world of {} ranks ({}dp {} x cp {}{})", rank, layout.world_size(),
        pp > 1 ? fmt::format("pp {} x ", pp) : std::string(), layout.data_parallel_size,
        layout.context_parallel_size, tp > 1 ? fmt::format(" x tp {}", tp) : std::string()));
  }
}

// A group of stage 0 moved to `stage`: its ranks and its color shift by whole stages.
RankGroup on_stage(const ParallelLayout& layout, RankGroup group, int stage, int groups_per_stage) {
  group.first_rank += stage * layout.stage_size();
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
  const int tp = layout.tensor_model_parallel_size;
  const int etp = layout.expert_tensor_parallel_size;
  if (tp < 1) {
    problems.push_back(fmt::format("model.tensor_model_parallel_size: {}: must be >= 1", tp));
  } else if (etp != 1 && etp != tp) {
    problems.push_back(fmt::format(
        "model.expert_tensor_parallel_size: {}: must be 1 (whole experts per EP rank) or "
        "tensor_model_parallel_size ({}) (each expert split over the TP group)",
        etp, tp));
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
  if (tp == 1 && pool % ep != 0) {
    problems.push_back(fmt::format(
        "model.expert_model_parallel_size: {}: must divide the pool of data_parallel_size ({}) x "
        "context_parallel_size ({}) = {} ranks",
        ep, dp, cp, pool));
  } else if (tp > 1 && layout.stage_size() % (etp * ep) != 0) {
    problems.push_back(fmt::format(
        "model.expert_model_parallel_size: {}: expert_tensor_parallel_size ({}) x {} must divide "
        "the {} ranks of a pipeline stage: tensor_model_parallel_size ({}) x data_parallel_size "
        "({}) x context_parallel_size ({})",
        ep, etp, ep, layout.stage_size(), tp, dp, cp));
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
                                int min_dynamic_context_parallel_size, PipelineSizes pipeline,
                                TensorSizes tensor) {
  if (pipeline.stages < 1 || world_size % pipeline.stages != 0) {
    core::throw_config_error(
        "model.pipeline_model_parallel_size",
        fmt::format("{}: must be >= 1 and divide the world of {} ranks (world = "
                    "pipeline_model_parallel_size x data_parallel_size x context_parallel_size x "
                    "tensor_model_parallel_size)",
                    pipeline.stages, world_size));
  }
  const int stage_ranks = world_size / pipeline.stages;
  if (tensor.tensor < 1 || stage_ranks % tensor.tensor != 0) {
    core::throw_config_error(
        "model.tensor_model_parallel_size",
        fmt::format("{}: must be >= 1 and divide the {} ranks of a pipeline stage (world {} = "
                    "pipeline_model_parallel_size {} x tensor_model_parallel_size x "
                    "context_parallel_size x data_parallel_size)",
                    tensor.tensor, stage_ranks, world_size, pipeline.stages));
  }
  const int pool = stage_ranks / tensor.tensor;
  if (tensor.tensor > 1 && (context_parallel_size < 1 || pool % context_parallel_size != 0)) {
    core::throw_config_error(
        "model.context_parallel_size",
        fmt::format("{}: must be >= 1 and divide world {} / (pipeline_model_parallel_size {} x "
                    "tensor_model_parallel_size {}) = {} (world = pp x dp x cp x tp)",
                    context_parallel_size, world_size, pipeline.stages, tensor.tensor, pool));
  }
  if (context_parallel_size < 1 || pool % context_parallel_size != 0) {
    core::throw_config_error(
        "model.context_parallel_size",
        pipeline.stages == 1
            ? fmt::format("{}: must be >= 1 and divide the world of {} ranks (TP = PP = 1, so "
                          "world = data_parallel_size x context_parallel_size)",
                          context_parallel_size, world_size)
            : fmt::format("{}: must be >= 1 and divide the {} ranks of a pipeline stage (TP = 1, "
                          "so world = pipeline_model_parallel_size ({}) x data_parallel_size x "
                          "context_parallel_size)",
                          context_parallel_size, pool, pipeline.stages));
  }
  ParallelLayout layout;
  layout.tensor_model_parallel_size = tensor.tensor;
  layout.expert_tensor_parallel_size = tensor.expert;
  layout.pipeline_model_parallel_size = pipeline.stages;
  layout.virtual_pipeline_model_parallel_size = pipeline.virtual_chunks;
  layout.data_parallel_size = pool / context_parallel_size;
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
    case GroupAxis::tensor_parallel:
      return "tensor_parallel";
    case GroupAxis::expert_tensor_parallel:
      return "expert_tensor_parallel";
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
  const int tp = layout.tensor_model_parallel_size;
  const int cp = layout.context_parallel_size;
  const int ep = layout.expert_model_parallel_size;
  const int etp = layout.expert_tensor_parallel_size;
  const int stage_size = layout.stage_size();
  const int local = rank % stage_size;  // the rank inside its stage
  RankCoordinates at;
  at.pipeline_parallel_index = rank / stage_size;
  at.tensor_parallel_index = local % tp;
  at.pool_rank = local / tp;
  at.data_parallel_index = at.pool_rank / cp;
  at.context_parallel_index = at.pool_rank % cp;
  at.expert_tensor_parallel_index = local % etp;
  at.expert_parallel_index = local / etp % ep;
  at.expert_data_parallel_index = local / (etp * ep);
  return at;
}

RankGroup pipeline_group_of(const ParallelLayout& layout, int rank) {
  check_rank(layout, rank);
  const int stage_size = layout.stage_size();
  const int local = rank % stage_size;
  return RankGroup{local, stage_size, layout.pipeline_model_parallel_size, local};
}

namespace {

// The group of `axis` holding the stage-0 rank `local` (coordinates `where`).
RankGroup group_in_stage(const ParallelLayout& layout, GroupAxis axis, int local,
                         const RankCoordinates& where) {
  const int tp = layout.tensor_model_parallel_size;
  const int dp = layout.data_parallel_size;
  const int cp = layout.context_parallel_size;
  const int ep = layout.expert_model_parallel_size;
  const int etp = layout.expert_tensor_parallel_size;
  const int pool = layout.pool_size();
  const int t = where.tensor_parallel_index;
  const int expert_block = etp * ep;  // one EP group with its expert-TP groups
  switch (axis) {
    case GroupAxis::context_parallel:
      return RankGroup{where.data_parallel_index * cp * tp + t, tp, cp,
                       where.data_parallel_index * tp + t};
    case GroupAxis::data_parallel:
      return RankGroup{where.context_parallel_index * tp + t, cp * tp, dp,
                       where.context_parallel_index * tp + t};
    case GroupAxis::pool:
      return RankGroup{t, tp, pool, t};
    case GroupAxis::expert_parallel:
      return RankGroup{local - local % expert_block + where.expert_tensor_parallel_index, etp, ep,
                       where.expert_data_parallel_index * etp + where.expert_tensor_parallel_index};
    case GroupAxis::expert_data_parallel:
      return RankGroup{local % expert_block, expert_block, layout.stage_size() / expert_block,
                       local % expert_block};
    case GroupAxis::tensor_parallel:
      return RankGroup{local - t, 1, tp, where.pool_rank};
    case GroupAxis::expert_tensor_parallel:
      return RankGroup{local - where.expert_tensor_parallel_index, 1, etp, local / etp};
  }
  core::throw_runtime_error("unknown group axis");
}

}  // namespace

RankGroup group_of(const ParallelLayout& layout, GroupAxis axis, int rank) {
  const RankCoordinates where = coordinates_of(layout, rank);
  return on_stage(layout, group_in_stage(layout, axis, rank % layout.stage_size(), where),
                  where.pipeline_parallel_index, num_groups(layout, axis));
}

int num_groups(const ParallelLayout& layout, GroupAxis axis) {
  const int tp = layout.tensor_model_parallel_size;
  switch (axis) {
    case GroupAxis::context_parallel:
      return layout.data_parallel_size * tp;
    case GroupAxis::data_parallel:
      return layout.context_parallel_size * tp;
    case GroupAxis::pool:
      return tp;
    case GroupAxis::expert_parallel:
      return layout.stage_size() / layout.expert_model_parallel_size;
    case GroupAxis::expert_data_parallel:
      return layout.expert_tensor_parallel_size * layout.expert_model_parallel_size;
    case GroupAxis::tensor_parallel:
      return layout.pool_size();
    case GroupAxis::expert_tensor_parallel:
      return layout.stage_size() / layout.expert_tensor_parallel_size;
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
  const int tp = layout.tensor_model_parallel_size;
  const int t = where.tensor_parallel_index;
  const int r = where.pool_rank;
  return on_stage(layout, RankGroup{(r - r % size) * tp + t, tp, size, r / size * tp + t},
                  where.pipeline_parallel_index, tp * layout.pool_size() / size);
}

namespace {

// Groups 0 .. min(count, limit) - 1 of an axis, found by walking the world in rank order (every
// group index is reached from its lowest rank).
template <typename GroupOf>
std::vector<RankGroup> first_groups(int world_size, int count, int limit, GroupOf group_of_rank) {
  std::vector<RankGroup> groups(static_cast<std::size_t>(std::min(count, limit)));
  std::vector<char> found(groups.size(), 0);
  std::size_t remaining = groups.size();
  for (int rank = 0; rank < world_size && remaining > 0; ++rank) {
    const RankGroup group = group_of_rank(rank);
    const auto slot = static_cast<std::size_t>(group.index);
    if (slot >= groups.size() || found[slot]) continue;
    groups[slot] = group;
    found[slot] = 1;
    --remaining;
  }
  return groups;
}

}  // namespace

std::string format_layout(const ParallelLayout& layout, int max_groups_listed) {
  const int tp = layout.tensor_model_parallel_size;
  const int pp = layout.pipeline_model_parallel_size;
  const int expert_block = layout.expert_tensor_parallel_size * layout.expert_model_parallel_size;
  std::string text;
  if (tp == 1 && pp == 1) {
    text = fmt::format(
        "parallel layout: world {} = data_parallel {} x context_parallel {} (TP = PP = 1, CP "
        "fastest: rank = dp_index * {} + cp_index); expert_parallel {} x expert_data_parallel "
        "{}\n",
        layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size,
        layout.context_parallel_size, layout.expert_model_parallel_size,
        layout.pool_size() / layout.expert_model_parallel_size);
  } else if (tp == 1) {
    text = fmt::format(
        "parallel layout: world {} = pipeline {} x data_parallel {} x context_parallel {} (TP = "
        "1; stage slowest, CP fastest: rank = stage * {} + dp_index * {} + cp_index); "
        "{} virtual chunk(s) per stage; each stage's pool: expert_parallel {} x "
        "expert_data_parallel {}; the groups of stage 0 (stage s: + s * {})\n",
        layout.world_size(), pp, layout.data_parallel_size, layout.context_parallel_size,
        layout.pool_size(), layout.context_parallel_size,
        layout.virtual_pipeline_model_parallel_size, layout.expert_model_parallel_size,
        layout.pool_size() / layout.expert_model_parallel_size, layout.pool_size());
  } else {
    text = fmt::format(
        "parallel layout: world {} = pipeline {} x data_parallel {} x context_parallel {} x "
        "tensor_parallel {} (Megatron order tp-cp-dp-pp, TP fastest, stage slowest: rank = "
        "stage * {} + (dp_index * {} + cp_index) * {} + tp_index; one dp x cp pool of {} ranks "
        "per TP rank and stage); {} virtual chunk(s) per stage; each stage's experts: "
        "expert_tensor_parallel {} x expert_parallel {} x expert_data_parallel {}{}\n",
        layout.world_size(), pp, layout.data_parallel_size, layout.context_parallel_size, tp,
        layout.stage_size(), layout.context_parallel_size, tp, layout.pool_size(),
        layout.virtual_pipeline_model_parallel_size, layout.expert_tensor_parallel_size,
        layout.expert_model_parallel_size, layout.stage_size() / expert_block,
        pp > 1 ? fmt::format("; the groups of stage 0 (stage s: + s * {})", layout.stage_size())
               : std::string());
  }
  if (pp > 1) {
    text += fmt::format("  pipeline_parallel ({} groups): {} ...\n", layout.stage_size(),
                        pipeline_group_of(layout, 0).to_string());
  }
  auto list_groups = [&](const std::string& label, int count, auto group_of_rank) {
    text += fmt::format("  {} ({} group{}):", label, count, count == 1 ? "" : "s");
    for (const RankGroup& group :
         first_groups(layout.world_size(), count, max_groups_listed, group_of_rank)) {
      text += " " + group.to_string();
    }
    if (count > max_groups_listed) text += fmt::format(" ... ({} more)", count - max_groups_listed);
    text += "\n";
  };
  for (const GroupAxis axis : all_group_axes) {
    // Without TP the TP axes are single ranks: not worth a line each.
    const bool tensor_axis =
        axis == GroupAxis::tensor_parallel || axis == GroupAxis::expert_tensor_parallel;
    if (tensor_axis && tp == 1) continue;
    list_groups(group_axis_name(axis), num_groups(layout, axis),
                [&](int rank) { return group_of(layout, axis, rank); });
  }
  if (!layout.dynamic_context_parallel) {
    text += "  dynamic CP: off\n";
    return text;
  }
  text +=
      fmt::format("  dynamic CP: sizes {} (a group is created the first time its size is used)\n",
                  fmt::join(dynamic_cp_group_sizes(layout), ", "));
  for (const int size : dynamic_cp_group_sizes(layout)) {
    list_groups(fmt::format("dynamic CP size {}", size), tp * layout.pool_size() / size,
                [&](int rank) { return dynamic_cp_group_of(layout, size, rank); });
  }
  return text;
}

}  // namespace dyncp::dist
