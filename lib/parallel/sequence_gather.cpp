#include "parallel/sequence_gather.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm_timing.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {

std::size_t row_bytes(const Tensor& t) {
  return static_cast<std::size_t>(t.shape().row_numel()) * core::dtype_size(t.dtype());
}

}  // namespace

void SequenceGather::begin_bin(dist::Comm& group, core::Arena& keep,
                               const model::LocalBinLayout& layout) {
  group_ = &group;
  local_rows_ = layout.positions.numel();
  const std::int64_t ranks = group.size();
  const std::int64_t sequences = layout.cu_seqlens.numel() - 1;

  std::int64_t shape_mine[2] = {local_rows_, sequences};
  std::vector<std::int64_t> shapes(static_cast<std::size_t>(2 * ranks));
  group.all_gather(shape_mine, 2, shapes.data(), DType::i64);
  for (std::int64_t r = 0; r < ranks; ++r) {
    if (shapes[static_cast<std::size_t>(2 * r + 1)] != sequences) {
      core::throw_runtime_error(
          "sequence gather: rank " + std::to_string(group.rank()) + " of group '" + group.name() +
          "' holds " + std::to_string(sequences) + " sequences but group rank " +
          std::to_string(r) + " holds " +
          std::to_string(shapes[static_cast<std::size_t>(2 * r + 1)]) +
          " (every rank of a group must hold the zigzag shard of the same bin)");
    }
  }
  // Row counts may differ between ranks only if the shard cut does; all_gather needs equal
  // counts, which the zigzag contract guarantees (every rank gets 2 of 2c equal chunks).
  for (std::int64_t r = 0; r < ranks; ++r) {
    if (shapes[static_cast<std::size_t>(2 * r)] != local_rows_) {
      core::throw_runtime_error(
          "sequence gather: rank " + std::to_string(group.rank()) + " of group '" + group.name() +
          "' holds " + std::to_string(local_rows_) + " rows but group rank " + std::to_string(r) +
          " holds " + std::to_string(shapes[static_cast<std::size_t>(2 * r)]));
    }
  }

  const std::int64_t gathered_rows = ranks * local_rows_;
  std::vector<std::int32_t> positions(static_cast<std::size_t>(gathered_rows));
  std::vector<std::int32_t> cu(static_cast<std::size_t>(ranks * (sequences + 1)));
  group.all_gather(layout.positions.raw_data(), static_cast<std::size_t>(local_rows_),
                   positions.data(), DType::i32);
  group.all_gather(layout.cu_seqlens.raw_data(), static_cast<std::size_t>(sequences + 1), cu.data(),
                   DType::i32);

  whole_cu_seqlens_ = keep.allocate({sequences + 1}, DType::i32);
  whole_positions_ = keep.allocate({gathered_rows}, DType::i32);
  whole_from_gathered_ = keep.allocate({gathered_rows}, DType::i32);
  own_in_whole_ = keep.allocate({local_rows_}, DType::i32);
  std::int32_t* whole_cu = whole_cu_seqlens_.data<std::int32_t>();
  std::int32_t* whole_positions = whole_positions_.data<std::int32_t>();
  std::int32_t* from_gathered = whole_from_gathered_.data<std::int32_t>();
  std::int32_t* own = own_in_whole_.data<std::int32_t>();

  std::int32_t next = 0;
  whole_cu[0] = 0;
  for (std::int64_t s = 0; s < sequences; ++s) {
    const std::int32_t first = next;
    for (std::int64_t r = 0; r < ranks; ++r) {
      const std::int32_t* rank_cu = cu.data() + r * (sequences + 1);
      for (std::int32_t row = rank_cu[s]; row < rank_cu[s + 1]; ++row) {
        from_gathered[next++] = static_cast<std::int32_t>(r * local_rows_ + row);
      }
    }
    // Position order inside the sequence; positions must be exactly 0..L-1.
    std::sort(from_gathered + first, from_gathered + next, [&](std::int32_t a, std::int32_t b) {
      return positions[static_cast<std::size_t>(a)] < positions[static_cast<std::size_t>(b)];
    });
    for (std::int32_t w = first; w < next; ++w) {
      const std::int32_t position = positions[static_cast<std::size_t>(from_gathered[w])];
      if (position != w - first) {
        core::throw_runtime_error("sequence gather: sequence " + std::to_string(s) +
                                  " of the bin on group '" + group.name() +
                                  "' does not hold every position 0.." +
                                  std::to_string(next - first - 1) + " exactly once");
      }
      whole_positions[w] = position;
      const std::int32_t gathered = from_gathered[w];
      if (gathered / local_rows_ == group.rank()) own[gathered % local_rows_] = w;
    }
    whole_cu[s + 1] = next;
  }
  if (next != gathered_rows) {
    core::throw_runtime_error("sequence gather: " + std::to_string(gathered_rows - next) +
                              " rows of group '" + group.name() + "' belong to no sequence");
  }
}

void SequenceGather::gather(const Tensor& local, const Tensor& whole, core::Arena& scratch,
                            double& comm_ms) {
  DYNCP_CHECK(local.size(0) == local_rows_ && whole.size(0) == whole_rows(),
              "sequence gather: tensors do not match the bin");
  core::ArenaScope scope(scratch);
  core::Shape staged_shape = local.shape();
  staged_shape[0] = whole_rows();
  const Tensor staged = scratch.allocate(staged_shape, local.dtype());
  {
    ScopedMilliseconds timer(comm_ms);
    group_->all_gather(local.raw_data(), static_cast<std::size_t>(local.numel()), staged.raw_data(),
                       local.dtype());
  }
  const std::size_t bytes = row_bytes(local);
  const auto* src = static_cast<const std::byte*>(staged.raw_data());
  auto* dst = static_cast<std::byte*>(whole.raw_data());
  const std::int32_t* from = whole_from_gathered_.data<std::int32_t>();
  for (std::int64_t w = 0; w < whole_rows(); ++w) {
    std::memcpy(dst + static_cast<std::size_t>(w) * bytes,
                src + static_cast<std::size_t>(from[w]) * bytes, bytes);
  }
}

void SequenceGather::keep_own(const Tensor& whole, const Tensor& local) const {
  DYNCP_CHECK(local.size(0) == local_rows_ && whole.size(0) == whole_rows(),
              "sequence gather: tensors do not match the bin");
  const std::size_t bytes = row_bytes(local);
  const auto* src = static_cast<const std::byte*>(whole.raw_data());
  auto* dst = static_cast<std::byte*>(local.raw_data());
  const std::int32_t* own = own_in_whole_.data<std::int32_t>();
  for (std::int64_t row = 0; row < local_rows_; ++row) {
    std::memcpy(dst + static_cast<std::size_t>(row) * bytes,
                src + static_cast<std::size_t>(own[row]) * bytes, bytes);
  }
}

}  // namespace dyncp::parallel
