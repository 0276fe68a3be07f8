#pragma once
// What one rank needs to run one microbatch of a Schedule: its bin's boundaries, its runtime
// CP group, and its zigzag shard of the bin.
//
// The bin is the concatenation (THD, no batch dim) of the rank's samples in schedule order,
// each at its padded length. With group size c and rank k in the group (0 <= k < c), every
// sequence i of padded length L_i (L_i % 2c == 0 when c > 1) is cut into 2c chunks of
// L_i / 2c tokens, and the rank keeps chunk k then chunk 2c-1-k, sequences in bin order.
// cu_seqlens stay global (whole-sequence, whole-bin) boundaries, as attention kernels expect.
//
// Worked example: samples of real lengths 5 and 3, padded to 8 and 4, on a group of c = 2
// ranks starting at pool rank 6; this is pool rank 7, so k = 1.
//   cu_seqlens        = [0, 5, 8]        (real lengths 5, 3)
//   cu_seqlens_padded = [0, 8, 12]       (padded lengths 8, 4)
//   max_seqlen        = 8;  group = {start 6, size 2, rank 1};  local tokens = 12 / 2 = 6
//   sequence 0 (bin tokens 0..7), chunks of 2: [0,2) [2,4) [4,6) [6,8); k = 1 keeps chunk 1
//     and chunk 2 -> bin tokens [2,4) and [4,6), merged to one range [2,6), positions 2..5
//   sequence 1 (bin tokens 8..11), chunks of 1: k = 1 keeps [9,10) and [10,11) -> [9,11)
//   local_ranges = {[2,6) seq 0 pos 2}, {[9,11) seq 1 pos 1}
// Rank k = 0 of the same group gets {[0,2) pos 0}, {[6,8) pos 6}, {[8,9) pos 0}, {[11,12) pos 3}.

#include <cstdint>
#include <span>
#include <vector>

#include "packing/alignment.hpp"
#include "packing/schedule.hpp"

namespace dyncp::packing {

struct TokenRange {
  std::int64_t begin = 0;           // bin token index (padded coordinates), inclusive
  std::int64_t end = 0;             // exclusive
  std::int64_t sequence = 0;        // index of the sequence in the bin
  std::int64_t first_position = 0;  // position (for RoPE) of `begin` inside its sequence
};

struct PackedSeqParams {
  std::vector<std::int64_t> sample_ids;         // the bin's samples, in order
  std::vector<std::int64_t> cu_seqlens;         // prefix sums of real lengths, size n+1
  std::vector<std::int64_t> cu_seqlens_padded;  // prefix sums of padded lengths, size n+1
  std::int64_t max_seqlen = 0;                  // longest padded length in the bin
  std::int64_t group_start_rank = 0;            // runtime CP group: pool ranks
  std::int64_t group_size = 1;                  //   [start, start + size)
  std::int64_t rank_in_group = 0;
  std::vector<TokenRange> local_ranges;  // this rank's zigzag shard, in local order
  std::int64_t local_num_tokens = 0;     // cu_seqlens_padded.back() / group_size
};

// `original_lengths[id]` and `padded_lengths[id]` for every id of the global batch. Data errors
// (naming the sample) for original > padded, original < 1, or a padded length that the group
// cannot split (L % 2c != 0 with c > 1: pad to the alignment multiple, packing/alignment.hpp).
PackedSeqParams make_packed_seq_params(const Schedule& schedule, std::int64_t microbatch,
                                       std::int64_t rank,
                                       std::span<const std::int64_t> original_lengths,
                                       std::span<const std::int64_t> padded_lengths);

// The same from real lengths: each sequence is padded for the group it runs on in this
// microbatch (`alignment`), and with `fold_alignment_padding` that padded length is also
// reported as its real length (cu_seqlens == cu_seqlens_padded).
PackedSeqParams make_packed_seq_params(const Schedule& schedule, std::int64_t microbatch,
                                       std::int64_t rank,
                                       std::span<const std::int64_t> real_lengths,
                                       const AlignmentRule& alignment, bool fold_alignment_padding);

}  // namespace dyncp::packing
