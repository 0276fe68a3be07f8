#include "dist/parallel_state.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <chrono>
#include <cstdint>

#include "core/error.hpp"

namespace dyncp::dist {

namespace {

std::size_t axis_slot(GroupAxis axis) {
  return static_cast<std::size_t>(axis);
}

const char* short_axis_name(GroupAxis axis) {
  switch (axis) {
    case GroupAxis::context_parallel:
      return "cp";
    case GroupAxis::data_parallel:
      return "dp";
    case GroupAxis::pool:
      return "pool";
    case GroupAxis::expert_parallel:
      return "ep";
    case GroupAxis::expert_data_parallel:
      return "expert_dp";
    case GroupAxis::tensor_parallel:
      return "tp";
    case GroupAxis::expert_tensor_parallel:
      return "expert_tp";
  }
  return "?";
}

std::string sizes_of_mask(std::uint64_t mask) {
  std::vector<long long> sizes;
  for (int bit = 0; bit < 64; ++bit) {
    if ((mask >> bit) & 1u) sizes.push_back(1LL << bit);
  }
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

}  // namespace

ParallelState::ParallelState(Comm& world, const ParallelLayout& layout,
                             const ParallelStateOptions& options)
    : world_(world), layout_(layout), options_(options) {
  validate_layout(layout_);
  if (world_.size() != layout_.world_size()) {
    std::string tensor_factor =
        layout_.tensor_model_parallel_size == 1
            ? std::string()
            : fmt::format("tensor_model_parallel_size ({}) x ", layout_.tensor_model_parallel_size);
    if (layout_.pipeline_model_parallel_size > 1)
      tensor_factor = fmt::format("pipeline_model_parallel_size ({}) x {}",
                                  layout_.pipeline_model_parallel_size, tensor_factor);
    core::throw_config_error(
        "model.context_parallel_size",
        fmt::format("{}data_parallel_size ({}) x context_parallel_size ({}) = {} ranks, but the "
                    "job has {} ranks",
                    tensor_factor, layout_.data_parallel_size, layout_.context_parallel_size,
                    layout_.world_size(), world_.size()));
  }
  coordinates_ = coordinates_of(layout_, world_.rank());
  for (const GroupAxis axis : all_group_axes) {
    const RankGroup members = group_of(layout_, axis, world_.rank());
    auto comm =
        world_.split(members.index, members.position_of(world_.rank()), short_axis_name(axis));
    DYNCP_CHECK(
        comm && comm->size() == members.size && comm->rank() == members.position_of(world_.rank()),
        "split produced a group that differs from the layout's");
    static_groups_[axis_slot(axis)] = std::move(comm);
  }
  const RankGroup stages = pipeline_group_of(layout_, world_.rank());
  pipeline_ = world_.split(stages.index, stages.position_of(world_.rank()), "pp");
  DYNCP_CHECK(pipeline_ && pipeline_->size() == stages.size,
              "split produced a pipeline group that differs from the layout's");
  if (stages.size > 1) {
    const int stage = coordinates_.pipeline_parallel_index;
    const bool holds_embedding_or_head = stage == 0 || stage == stages.size - 1;
    embedding_group_ =
        world_.split(holds_embedding_or_head ? stages.index : -1, stage, "embedding");
  }
  spdlog::debug("parallel state: rank {} = tp_index {}, dp_index {}, cp_index {}, ep_index {}",
                world_.rank(), coordinates_.tensor_parallel_index, coordinates_.data_parallel_index,
                coordinates_.context_parallel_index, coordinates_.expert_parallel_index);
}

ParallelState::~ParallelState() = default;

Comm& ParallelState::group(GroupAxis axis) {
  return *static_groups_[axis_slot(axis)];
}

bool ParallelState::has_dynamic_group(int size) const {
  if (!is_dynamic_cp_group_size(layout_, size)) return false;
  return dynamic_[static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(size)))] !=
         nullptr;
}

Comm& ParallelState::dynamic_group(int size) {
  // dynamic_cp_group_of rejects sizes this layout never has, with the reason.
  const RankGroup members = dynamic_cp_group_of(layout_, size, world_.rank());
  Comm* comm = dynamic_[static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(size)))];
  if (comm == nullptr) {
    core::throw_runtime_error(fmt::format(
        "dynamic CP group of size {} (ranks {}) was not created: call ensure_dynamic_groups with "
        "every size a step uses, on every rank, before its first microbatch (creation is "
        "collective over the pool)",
        size, members.to_string()));
  }
  return *comm;
}

Comm& ParallelState::dynamic_group_at(int first_rank, int size) {
  // Schedules name pool ranks; under TP each TP rank runs the same schedule on its own pool.
  const int rank = coordinates_.pool_rank;
  if (size < 1 || first_rank % size != 0 || rank < first_rank || rank >= first_rank + size) {
    core::throw_runtime_error(fmt::format(
        "pool rank {} was scheduled into the group of {} ranks starting at pool rank {}: a group "
        "must hold its rank and start at a multiple of its size",
        rank, size, first_rank));
  }
  return dynamic_group(size);
}

void ParallelState::ensure_all_dynamic_groups() {
  const std::vector<int> sizes = dynamic_cp_group_sizes(layout_);
  ensure_dynamic_groups(sizes);
}

void ParallelState::ensure_dynamic_groups(std::span<const int> sizes) {
  std::uint64_t requested = 0;
  for (const int size : sizes) {
    // Rejects sizes this layout never has (and dynamic CP being off) with the reason.
    dynamic_cp_group_of(layout_, size, world_.rank());
    requested |= std::uint64_t{1} << std::countr_zero(static_cast<unsigned>(size));
  }
  if (options_.verify_group_requests) {
    // max of (mask, -mask) gives the largest and the smallest mask in one call.
    std::int64_t extremes[2] = {static_cast<std::int64_t>(requested),
                                -static_cast<std::int64_t>(requested)};
    pool().all_reduce(std::span<std::int64_t>(extremes), ReduceOp::max);
    const auto largest = static_cast<std::uint64_t>(extremes[0]);
    const auto smallest = static_cast<std::uint64_t>(-extremes[1]);
    if (largest != smallest) {
      core::throw_runtime_error(fmt::format(
          "ensure_dynamic_groups: ranks asked for different dynamic CP group sizes (this rank "
          "{}, others up to {} and down to {}); every rank must pass the sizes of the same "
          "schedule",
          sizes_of_mask(requested), sizes_of_mask(largest), sizes_of_mask(smallest)));
    }
  }
  for (std::size_t log2 = 0; log2 <= max_log2_pool; ++log2) {
    if (((requested >> log2) & 1u) == 0 || dynamic_[log2] != nullptr) continue;
    const int size = 1 << log2;
    if (size == layout_.context_parallel_size) {
      dynamic_[log2] = &context_parallel();
      spdlog::debug("dynamic CP group size {}: reusing the context_parallel group", size);
      continue;
    }
    if (size == layout_.pool_size()) {
      dynamic_[log2] = &pool();
      spdlog::debug("dynamic CP group size {}: reusing the pool group", size);
      continue;
    }
    const RankGroup members = dynamic_cp_group_of(layout_, size, world_.rank());
    const auto start = std::chrono::steady_clock::now();
    owned_dynamic_[log2] = pool().split(members.index, members.position_of(world_.rank()),
                                        fmt::format("dynamic_cp{}", size));
    const double milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    DYNCP_CHECK(owned_dynamic_[log2] && owned_dynamic_[log2]->size() == size,
                "dynamic CP split produced a group of the wrong size");
    dynamic_[log2] = owned_dynamic_[log2].get();
    created_dynamic_sizes_.push_back(size);
    spdlog::info("created dynamic CP groups of size {} ({} groups; creation #{}) in {:.2f} ms",
                 size, layout_.world_size() / size, created_dynamic_sizes_.size(), milliseconds);
  }
}

CommCounters ParallelState::total_counters() const {
  CommCounters total = world_.counters();
  for (const auto& comm : static_groups_) total += comm->counters();
  total += pipeline_->counters();
  if (embedding_group_) total += embedding_group_->counters();
  for (const auto& comm : owned_dynamic_) {
    if (comm) total += comm->counters();
  }
  return total;
}

std::string ParallelState::format_counters() const {
  std::string text;
  auto line = [&text](const Comm& comm) {
    const OpCounter total = comm.counters().total();
    text +=
        fmt::format("  {:<14} size {:>5}  calls {:>8}  sent {:>14} B  received {:>14} B\n",
                    comm.name(), comm.size(), total.calls, total.bytes_sent, total.bytes_received);
  };
  line(world_);
  for (const auto& comm : static_groups_) line(*comm);
  line(*pipeline_);
  if (embedding_group_) line(*embedding_group_);
  for (const auto& comm : owned_dynamic_) {
    if (comm) line(*comm);
  }
  return text;
}

}  // namespace dyncp::dist
