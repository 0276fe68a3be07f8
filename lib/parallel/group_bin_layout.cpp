#include "parallel/group_bin_layout.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

using core::DType;

GroupBinLayout gather_group_bin_layout(dist::Comm& group, core::Arena& host,
                                       const model::LocalBinLayout& local, std::string_view who) {
  DYNCP_CHECK(host.device() == core::Device::cpu, "the group bin layout is host metadata");
  const core::Tensor& local_positions =
      local.host_positions.defined() ? local.host_positions : local.positions;
  GroupBinLayout out;
  out.ranks = group.size();
  out.local_rows = local.positions.numel();
  out.sequences = local.cu_seqlens.numel() - 1;

  const std::int64_t shape_mine[2] = {out.local_rows, out.sequences};
  const core::Tensor shapes = host.allocate({out.ranks, 2}, DType::i64);
  group.all_gather(shape_mine, 2, shapes.raw_data(), DType::i64);
  const std::int64_t* all_shapes = shapes.data<std::int64_t>();
  for (std::int64_t r = 0; r < out.ranks; ++r) {
    if (all_shapes[2 * r] != out.local_rows || all_shapes[2 * r + 1] != out.sequences) {
      core::throw_runtime_error(
          std::string(who) + ": rank " + std::to_string(group.rank()) + " of group '" +
          group.name() + "' holds " + std::to_string(out.local_rows) + " rows in " +
          std::to_string(out.sequences) + " sequences but group rank " + std::to_string(r) +
          " holds " + std::to_string(all_shapes[2 * r]) + " in " +
          std::to_string(all_shapes[2 * r + 1]) +
          " (every rank of a group must hold the zigzag shard of the same bin)");
    }
  }
  out.positions = host.allocate({out.ranks * out.local_rows}, DType::i32);
  out.cu_seqlens = host.allocate({out.ranks * (out.sequences + 1)}, DType::i32);
  group.all_gather(local_positions.raw_data(), static_cast<std::size_t>(out.local_rows),
                   out.positions.raw_data(), DType::i32);
  group.all_gather(local.cu_seqlens.raw_data(), static_cast<std::size_t>(out.sequences + 1),
                   out.cu_seqlens.raw_data(), DType::i32);
  return out;
}

MergedGroupRows merge_group_rows(const GroupBinLayout& gathered, int rank, core::Arena& keep,
                                 bool whole_sequences, std::string_view who,
                                 std::string_view group_name) {
  const std::int64_t ranks = gathered.ranks;
  const std::int64_t local_rows = gathered.local_rows;
  const std::int64_t sequences = gathered.sequences;
  const std::int64_t gathered_rows = ranks * local_rows;
  const std::int32_t* positions = gathered.positions.data<std::int32_t>();
  const std::int32_t* cu = gathered.cu_seqlens.data<std::int32_t>();

  MergedGroupRows out;
  out.layout.cu_seqlens = keep.allocate({sequences + 1}, DType::i32);
  out.layout.positions = keep.allocate({gathered_rows}, DType::i32);
  out.from_gathered = keep.allocate({gathered_rows}, DType::i32);
  out.own_in_merged = keep.allocate({local_rows}, DType::i32);
  std::int32_t* merged_cu = out.layout.cu_seqlens.data<std::int32_t>();
  std::int32_t* merged_positions = out.layout.positions.data<std::int32_t>();
  std::int32_t* from_gathered = out.from_gathered.data<std::int32_t>();
  std::int32_t* own = out.own_in_merged.data<std::int32_t>();

  std::int32_t next = 0;
  merged_cu[0] = 0;
  for (std::int64_t s = 0; s < sequences; ++s) {
    const std::int32_t first = next;
    for (std::int64_t r = 0; r < ranks; ++r) {
      const std::int32_t* rank_cu = cu + r * (sequences + 1);
      for (std::int32_t row = rank_cu[s]; row < rank_cu[s + 1]; ++row)
        from_gathered[next++] = static_cast<std::int32_t>(r * local_rows + row);
    }
    std::sort(from_gathered + first, from_gathered + next,
              [&](std::int32_t a, std::int32_t b) { return positions[a] < positions[b]; });
    for (std::int32_t m = first; m < next; ++m) {
      const std::int32_t position = positions[from_gathered[m]];
      if (whole_sequences && position != m - first) {
        core::throw_runtime_error(std::string(who) + ": sequence " + std::to_string(s) +
                                  " of the bin on group '" + std::string(group_name) +
                                  "' does not hold every position 0.." +
                                  std::to_string(next - first - 1) + " exactly once");
      }
      merged_positions[m] = position;
      const std::int32_t source_row = from_gathered[m];
      if (source_row / local_rows == rank) own[source_row % local_rows] = m;
    }
    merged_cu[s + 1] = next;
  }
  if (next != gathered_rows) {
    core::throw_runtime_error(std::string(who) + ": " + std::to_string(gathered_rows - next) +
                              " rows of group '" + std::string(group_name) +
                              "' belong to no sequence");
  }
  return out;
}

core::Tensor on_device_of(const core::Tensor& like, core::Arena& keep, const core::Tensor& host) {
  if (like.device() == core::Device::cpu) return host;
  const core::Tensor copy = keep.allocate(host.shape(), host.dtype());
  copy.copy_from(host);
  return copy;
}

}  // namespace dyncp::parallel
