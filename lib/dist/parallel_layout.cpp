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
    if (layout.tensor_model_parallel_size == 1) {
      core::throw_runtime_error(
          fmt::format("rank {} is outside the pool of {} ranks (dp {} x cp {})", rank,
                      layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size));
    }
    core::throw_runtime_error(
        fmt::format("rank {} is outside the world of {} ranks (tp {} x dp {} x cp {})", rank,
                    layout.world_size(), layout.tensor_model_parallel_size,
                    layout.data_parallel_size, layout.context_parallel_size));
  }
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
  if (!problems.empty()) return problems;
  const int pool = layout.pool_size();
  if (tp == 1 && pool % ep != 0) {
    problems.push_back(fmt::format(
        "model.expert_model_parallel_size: {}: must divide the pool of data_parallel_size ({}) x "
        "context_parallel_size ({}) = {} ranks",
        ep, dp, cp, pool));
  } else if (tp > 1 && layout.world_size() % (etp * ep) != 0) {
    problems.push_back(fmt::format(
        "model.expert_model_parallel_size: {}: expert_tensor_parallel_size ({}) x {} must divide "
        "the world of tensor_model_parallel_size ({}) x data_parallel_size ({}) x "
        "context_parallel_size ({}) = {} ranks",
        ep, etp, ep, tp, dp, cp, layout.world_size()));
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
                                int min_dynamic_context_parallel_size,
                                int tensor_model_parallel_size, int expert_tensor_parallel_size) {
  if (tensor_model_parallel_size < 1 || world_size % tensor_model_parallel_size != 0) {
    core::throw_config_error(
        "model.tensor_model_parallel_size",
        fmt::format("{}: must be >= 1 and divide the world of {} ranks (world = "
                    "tensor_model_parallel_size x context_parallel_size x data_parallel_size)",
                    tensor_model_parallel_size, world_size));
  }
  if (tensor_model_parallel_size > 1) {
    const int pool = world_size / tensor_model_parallel_size;
    if (context_parallel_size < 1 || pool % context_parallel_size != 0) {
      core::throw_config_error(
          "model.context_parallel_size",
          fmt::format("{}: must be >= 1 and divide world {} / tensor_model_parallel_size {} = {} "
                      "(world = tp x cp x dp)",
                      context_parallel_size, world_size, tensor_model_parallel_size, pool));
    }
  } else if (context_parallel_size < 1 || world_size % context_parallel_size != 0) {
    core::throw_config_error(
        "model.context_parallel_size",
        fmt::format("{}: must be >= 1 and divide the world of {} ranks (TP = PP = 1, so world = "
                    "data_parallel_size x context_parallel_size)",
                    context_parallel_size, world_size));
  }
  ParallelLayout layout;
  layout.tensor_model_parallel_size = tensor_model_parallel_size;
  layout.expert_tensor_parallel_size = expert_tensor_parallel_size;
  layout.data_parallel_size = world_size / tensor_model_parallel_size / context_parallel_size;
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
  RankCoordinates at;
  at.tensor_parallel_index = rank % tp;
  at.pool_rank = rank / tp;
  at.data_parallel_index = at.pool_rank / cp;
  at.context_parallel_index = at.pool_rank % cp;
  at.expert_tensor_parallel_index = rank % etp;
  at.expert_parallel_index = rank / etp % ep;
  at.expert_data_parallel_index = rank / (etp * ep);
  return at;
}

RankGroup group_of(const ParallelLayout& layout, GroupAxis axis, int rank) {
  const RankCoordinates where = coordinates_of(layout, rank);
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
      return RankGroup{rank - rank % expert_block + where.expert_tensor_parallel_index, etp, ep,
                       where.expert_data_parallel_index * etp + where.expert_tensor_parallel_index};
    case GroupAxis::expert_data_parallel:
      return RankGroup{rank % expert_block, expert_block, layout.world_size() / expert_block,
                       rank % expert_block};
    case GroupAxis::tensor_parallel:
      return RankGroup{rank - t, 1, tp, where.pool_rank};
    case GroupAxis::expert_tensor_parallel:
      return RankGroup{rank - where.expert_tensor_parallel_index, 1, etp, rank / etp};
  }
  core::throw_runtime_error("unknown group axis");
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
      return layout.world_size() / layout.expert_model_parallel_size;
    case GroupAxis::expert_data_parallel:
      return layout.expert_tensor_parallel_size * layout.expert_model_parallel_size;
    case GroupAxis::tensor_parallel:
      return layout.pool_size();
    case GroupAxis::expert_tensor_parallel:
      return layout.world_size() / layout.expert_tensor_parallel_size;
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
  const int tp = layout.tensor_model_parallel_size;
  const int pool_rank = rank / tp;
  const int t = rank % tp;
  return RankGroup{(pool_rank - pool_rank % size) * tp + t, tp, size, pool_rank / size * tp + t};
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
  std::string text;
  if (tp == 1) {
    text = fmt::format(
        "parallel layout: world {} = data_parallel {} x context_parallel {} (TP = PP = 1, CP "
        "fastest: rank = dp_index * {} + cp_index); expert_parallel {} x expert_data_parallel "
        "{}\n",
        layout.pool_size(), layout.data_parallel_size, layout.context_parallel_size,
        layout.context_parallel_size, layout.expert_model_parallel_size,
        layout.pool_size() / layout.expert_model_parallel_size);
  } else {
    const int expert_block = layout.expert_tensor_parallel_size * layout.expert_model_parallel_size;
    text = fmt::format(
        "parallel layout: world {} = tensor_parallel {} x context_parallel {} x data_parallel {} "
        "(PP = 1, Megatron order tp-cp-dp, TP fastest: rank = (dp_index * {} + cp_index) * {} + "
        "tp_index; one dp x cp pool of {} ranks per TP rank); expert_tensor_parallel {} x "
        "expert_parallel {} x expert_data_parallel {}\n",
        layout.world_size(), tp, layout.context_parallel_size, layout.data_parallel_size,
        layout.context_parallel_size, tp, layout.pool_size(), layout.expert_tensor_parallel_size,
        layout.expert_model_parallel_size, layout.world_size() / expert_block);
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
