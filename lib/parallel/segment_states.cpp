#include "parallel/segment_states.hpp"

#include <algorithm>

#include "ops/segment_states.hpp"

namespace dyncp::parallel {

using core::DType;
using core::Tensor;

namespace {

bool own(std::int64_t g, std::int64_t first_own, std::int64_t end_own) {
  return g >= first_own && g < end_own;
}

// The ops' walks (host i32): per chain, its segments up to the last own one (prefixes), or
// from its end down to the first own one (suffixes); a chain without own segments walks none.
struct Walks {
  Tensor segments, offsets;
};

Walks walks_of(core::Arena& host, const SegmentChains& chains, std::int64_t first_own,
               std::int64_t end_own, bool suffixes) {
  std::vector<std::int32_t> segments, offsets{0};
  for (const std::vector<std::int64_t>& chain : chains) {
    const auto size = static_cast<std::int64_t>(chain.size());
    std::int64_t last = -1, first = size;
    for (std::int64_t i = 0; i < size; ++i) {
      if (!own(chain[static_cast<std::size_t>(i)], first_own, end_own)) continue;
      last = i;
      if (first == size) first = i;
    }
    if (suffixes) {
      for (std::int64_t i = size - 1; i >= first; --i)
        segments.push_back(static_cast<std::int32_t>(chain[static_cast<std::size_t>(i)]));
    } else {
      for (std::int64_t i = 0; i <= last; ++i)
        segments.push_back(static_cast<std::int32_t>(chain[static_cast<std::size_t>(i)]));
    }
    offsets.push_back(static_cast<std::int32_t>(segments.size()));
  }
  Walks walks{host.allocate({static_cast<std::int64_t>(segments.size())}, DType::i32),
              host.allocate({static_cast<std::int64_t>(offsets.size())}, DType::i32)};
  std::copy(segments.begin(), segments.end(), walks.segments.data<std::int32_t>());
  std::copy(offsets.begin(), offsets.end(), walks.offsets.data<std::int32_t>());
  return walks;
}

}  // namespace

void compose_incoming_states(const ops::OpContext& ctx, core::Arena& host,
                             const Tensor& transitions, const SegmentChains& chains,
                             std::int64_t first_own, std::int64_t end_own,
                             const Tensor& initial_states) {
  const Walks walks = walks_of(host, chains, first_own, end_own, false);
  ops::compose_segment_prefixes(ctx, transitions, walks.segments, walks.offsets, first_own, end_own,
                                initial_states);
}

void compose_final_state_grads(const ops::OpContext& ctx, core::Arena& host,
                               const Tensor& transitions, const Tensor& state_grads,
                               const SegmentChains& chains, std::int64_t first_own,
                               std::int64_t end_own, const Tensor& final_grads) {
  const Walks walks = walks_of(host, chains, first_own, end_own, true);
  ops::compose_segment_suffixes(ctx, transitions, state_grads, walks.segments, walks.offsets,
                                first_own, end_own, final_grads);
}

void own_state_grads(const ops::OpContext& ctx, const Tensor& query_maps, const Tensor& dout,
                     const Tensor& cu_seqlens, const Tensor& grads) {
  ops::segment_state_grads(ctx, query_maps, dout, cu_seqlens, grads);
}

}  // namespace dyncp::parallel
