#include "parallel/sequence_gather.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_bin_layout.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {}  // namespace

void SequenceGather::begin_bin(dist::Comm& group, core::Arena& keep,
                               const model::LocalBinLayout& layout) {
  group_ = &group;
  local_rows_ = layout.positions.numel();
  const GroupBinLayout gathered = gather_group_bin_layout(group, keep, layout, "sequence gather");
  const std::int64_t ranks = gathered.ranks;
  const std::int64_t sequences = gathered.sequences;
  const std::int64_t gathered_rows = ranks * local_rows_;
  const std::int32_t* positions = gathered.positions.data<std::int32_t>();
  const std::int32_t* cu = gathered.cu_seqlens.data<std::int32_t>();

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
      const std::int32_t* rank_cu = cu + r * (sequences + 1);
      for (std::int32_t row = rank_cu[s]; row < rank_cu[s + 1]; ++row) {
        from_gathered[next++] = static_cast<std::int32_t>(r * local_rows_ + row);
      }
    }
    // Position order inside the sequence; positions must be exactly 0..L-1.
    std::sort(from_gathered + first, from_gathered + next,
              [&](std::int32_t a, std::int32_t b) { return positions[a] < positions[b]; });
    for (std::int32_t w = first; w < next; ++w) {
      const std::int32_t position = positions[from_gathered[w]];
      if (position != w - first) {
        core::throw_runtime_error("sequence gather: sequence " + std::to_string(s) +
                                  " of the bin on group '" + group.name() +
                                  "' does not hold every position 0.." +
                                  std::to_string(next - first - 1) + " exactly once");
      }
      whole_positions[w] = position;
      const std::int32_t source_row = from_gathered[w];
      if (source_row / local_rows_ == group.rank()) own[source_row % local_rows_] = w;
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
  gather_rows(staged, whole, whole_from_gathered_.data<std::int32_t>());
}

void SequenceGather::keep_own(const Tensor& whole, const Tensor& local) const {
  DYNCP_CHECK(local.size(0) == local_rows_ && whole.size(0) == whole_rows(),
              "sequence gather: tensors do not match the bin");
  gather_rows(whole, local, own_in_whole_.data<std::int32_t>());
}

}  // namespace dyncp::parallel
