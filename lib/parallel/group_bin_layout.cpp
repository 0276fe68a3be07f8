#include "parallel/group_bin_layout.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

using core::DType;

GroupBinLayout gather_group_bin_layout(dist::Comm& group, core::Arena& keep,
                                       const model::LocalBinLayout& local, std::string_view who) {
  GroupBinLayout out;
  out.ranks = group.size();
  out.local_rows = local.positions.numel();
  out.sequences = local.cu_seqlens.numel() - 1;

  const std::int64_t shape_mine[2] = {out.local_rows, out.sequences};
  const core::Tensor shapes = keep.allocate({out.ranks, 2}, DType::i64);
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
  out.positions = keep.allocate({out.ranks * out.local_rows}, DType::i32);
  out.cu_seqlens = keep.allocate({out.ranks * (out.sequences + 1)}, DType::i32);
  group.all_gather(local.positions.raw_data(), static_cast<std::size_t>(out.local_rows),
                   out.positions.raw_data(), DType::i32);
  group.all_gather(local.cu_seqlens.raw_data(), static_cast<std::size_t>(out.sequences + 1),
                   out.cu_seqlens.raw_data(), DType::i32);
  return out;
}

}  // namespace dyncp::parallel
