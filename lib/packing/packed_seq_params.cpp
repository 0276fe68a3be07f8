#include "packing/packed_seq_params.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace dyncp::packing {
namespace {

void add_range(std::vector<TokenRange>& ranges, TokenRange range) {
  if (range.begin == range.end) return;
  if (!ranges.empty() && ranges.back().end == range.begin &&
      ranges.back().sequence == range.sequence) {
    ranges.back().end = range.end;  // chunks k and 2c-1-k touch when k = c-1
    return;
  }
  ranges.push_back(range);
}

// `lengths_on_group(id, group size)` gives the sequence's real and padded length there.
template <typename LengthsOnGroup>
PackedSeqParams build_params(const Schedule& schedule, std::int64_t microbatch, std::int64_t rank,
                             std::size_t batch_size, LengthsOnGroup lengths_on_group) {
  DYNCP_CHECK(microbatch >= 0 && microbatch < schedule.num_microbatches(),
              "microbatch " + std::to_string(microbatch) + " out of range");
  DYNCP_CHECK(rank >= 0 && rank < schedule.pool_size,
              "rank " + std::to_string(rank) + " out of range");
  const ScheduleGroup& group = schedule.group_of(microbatch, rank);
  PackedSeqParams params;
  params.group_start_rank = group.start_rank;
  params.group_size = group.size;
  params.rank_in_group = rank - group.start_rank;
  const auto ids = schedule.ids_of(group);
  params.sample_ids.assign(ids.begin(), ids.end());
  params.cu_seqlens.assign(1, 0);
  params.cu_seqlens_padded.assign(1, 0);
  const std::int64_t c = group.size;
  const std::int64_t k = params.rank_in_group;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    DYNCP_CHECK(id >= 0 && static_cast<std::size_t>(id) < batch_size,
                "id " + std::to_string(id) + " outside the batch");
    const SequenceLength length = lengths_on_group(static_cast<std::size_t>(id), c);
    const std::int64_t original = length.original;
    const std::int64_t padded = length.padded;
    const std::string where = "sample " + std::to_string(id);
    if (original < 1 || original > padded) {
      core::throw_data_error(where, "real length " + std::to_string(original) +
                                        " must lie in [1, padded length " + std::to_string(padded) +
                                        "]");
    }
    if (c > 1 && padded % (2 * c) != 0) {
      core::throw_data_error(where,
                             "padded length " + std::to_string(padded) +
                                 " is not a multiple of 2 x group size = " + std::to_string(2 * c) +
                                 "; pad samples for their group (packing/alignment.hpp)");
    }
    const std::int64_t bin_start = params.cu_seqlens_padded.back();
    params.cu_seqlens.push_back(params.cu_seqlens.back() + original);
    params.cu_seqlens_padded.push_back(bin_start + padded);
    params.max_seqlen = std::max(params.max_seqlen, padded);
    const auto sequence = static_cast<std::int64_t>(i);
    if (c == 1) {
      add_range(params.local_ranges, {bin_start, bin_start + padded, sequence, 0});
      continue;
    }
    const std::int64_t chunk = padded / (2 * c);
    const std::int64_t front = k * chunk;
    const std::int64_t back = (2 * c - 1 - k) * chunk;
    add_range(params.local_ranges, {bin_start + front, bin_start + front + chunk, sequence, front});
    add_range(params.local_ranges, {bin_start + back, bin_start + back + chunk, sequence, back});
  }
  params.local_num_tokens = params.cu_seqlens_padded.back() / c;
  return params;
}

}  // namespace

PackedSeqParams make_packed_seq_params(const Schedule& schedule, std::int64_t microbatch,
                                       std::int64_t rank,
                                       std::span<const std::int64_t> original_lengths,
                                       std::span<const std::int64_t> padded_lengths) {
  DYNCP_CHECK(original_lengths.size() == padded_lengths.size(), "length lists differ in size");
  return build_params(schedule, microbatch, rank, padded_lengths.size(),
                      [&](std::size_t id, std::int64_t) {
                        return SequenceLength{original_lengths[id], padded_lengths[id]};
                      });
}

PackedSeqParams make_packed_seq_params(const Schedule& schedule, std::int64_t microbatch,
                                       std::int64_t rank,
                                       std::span<const std::int64_t> real_lengths,
                                       const AlignmentRule& alignment,
                                       bool fold_alignment_padding) {
  return build_params(schedule, microbatch, rank, real_lengths.size(),
                      [&](std::size_t id, std::int64_t group_size) {
                        const std::int64_t real = real_lengths[id];
                        const std::int64_t padded = alignment.padded(real, group_size);
                        return SequenceLength{fold_alignment_padding ? padded : real, padded};
                      });
}

}  // namespace dyncp::packing
