#include "parallel/head_exchange.hpp"

#include "core/error.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/head_blocks.hpp"
#include "parallel/row_copy.hpp"

namespace dyncp::parallel {

using core::Tensor;

void HeadSlices::assign_query_side(const config::HeadSharding& sharding) {
  heads_per_rank = sharding.query_heads_per_rank();
  first_head.resize(static_cast<std::size_t>(sharding.ranks));
  for (std::int64_t r = 0; r < sharding.ranks; ++r)
    first_head[static_cast<std::size_t>(r)] = sharding.first_query_head(r);
  replicated = false;
}

void HeadSlices::assign_kv_side(const config::HeadSharding& sharding) {
  heads_per_rank = sharding.kv_heads_per_rank();
  first_head.resize(static_cast<std::size_t>(sharding.ranks));
  for (std::int64_t r = 0; r < sharding.ranks; ++r)
    first_head[static_cast<std::size_t>(r)] = sharding.first_kv_head(r);
  replicated = sharding.kv_replicas() > 1;
}

void HeadExchange::begin_bin(dist::Comm& group, const model::SeamContext& context,
                             const model::LocalBinLayout& local, bool whole_sequences,
                             std::string_view who) {
  group_ = &group;
  ops_ = context.ops;
  local_rows_ = local.positions.numel();
  core::Arena& host = context.host_arena();
  const GroupBinLayout gathered = gather_group_bin_layout(group, host, local, who);
  merged_ = merge_group_rows(gathered, group.rank(), host, whole_sequences, who, group.name());
  // The merged rows keep their global positions: the same window applies to them.
  merged_.layout.sliding_window = local.sliding_window;
  const Tensor device_positions =
      on_device_of(local.positions, *context.activations, merged_.layout.positions);
  if (device_positions.raw_data() != merged_.layout.positions.raw_data()) {
    merged_.layout.host_positions = merged_.layout.positions;
    merged_.layout.positions = device_positions;
  }
}

Tensor HeadExchange::allocate_heads(core::Arena& arena, const Tensor& local,
                                    const HeadSlices& slices) const {
  core::Shape shape = local.shape();
  shape[0] = merged_rows();
  shape[1] = slices.heads_per_rank;
  return arena.allocate(shape, local.dtype());
}

void HeadExchange::to_heads(const Tensor& local, const HeadSlices& slices, const Tensor& heads,
                            core::Arena& scratch, double& comm_ms) {
  DYNCP_CHECK(local.size(0) == local_rows_ && heads.size(0) == merged_rows() &&
                  heads.size(1) == slices.heads_per_rank,
              "head exchange: tensors do not match the bin");
  core::ArenaScope scope(scratch);
  const Tensor send = allocate_heads(scratch, local, slices);  // rank-order blocks
  const Tensor received = allocate_heads(scratch, local, slices);
  pack_head_blocks(ops_, local, slices.first_head, slices.heads_per_rank, send);
  {
    ScopedMilliseconds timer(comm_ms);
    group_->all_to_all(send.raw_data(), received.raw_data(),
                       static_cast<std::size_t>(send.numel() / group_->size()), local.dtype());
  }
  gather_rows(received, heads, merged_.from_gathered.data<std::int32_t>());
}

void HeadExchange::from_heads(const Tensor& heads, const HeadSlices& slices, const Tensor& local,
                              core::Arena& scratch, double& comm_ms) {
  DYNCP_CHECK(local.size(0) == local_rows_ && heads.size(0) == merged_rows() &&
                  heads.size(1) == slices.heads_per_rank,
              "head exchange: tensors do not match the bin");
  core::ArenaScope scope(scratch);
  const Tensor send = scratch.allocate(heads.shape(), heads.dtype());
  const Tensor received = scratch.allocate(heads.shape(), heads.dtype());
  scatter_rows(heads, send, merged_.from_gathered.data<std::int32_t>());
  {
    ScopedMilliseconds timer(comm_ms);
    group_->all_to_all(send.raw_data(), received.raw_data(),
                       static_cast<std::size_t>(send.numel() / group_->size()), heads.dtype());
  }
  unpack_head_blocks(ops_, received, slices.first_head, slices.heads_per_rank, local,
                     slices.replicated);
}

}  // namespace dyncp::parallel
