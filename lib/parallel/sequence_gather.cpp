#include "parallel/sequence_gather.hpp"

#include "core/error.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/group_bin_layout.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

void SequenceGather::begin_bin(dist::Comm& group, core::Arena& keep,
                               const model::LocalBinLayout& layout) {
  group_ = &group;
  local_rows_ = layout.positions.numel();
  DYNCP_CHECK(keep.device() == core::Device::cpu,
              "sequence gather plans on the host (the Gated DeltaNet CP path is host code)");
  const GroupBinLayout gathered = gather_group_bin_layout(group, keep, layout, "sequence gather");
  const MergedGroupRows merged =
      merge_group_rows(gathered, group.rank(), keep,
                       /*whole_sequences=*/true, "sequence gather", group.name());
  whole_cu_seqlens_ = merged.layout.cu_seqlens;
  whole_positions_ = merged.layout.positions;
  whole_from_gathered_ = merged.from_gathered;
  own_in_whole_ = merged.own_in_merged;
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
