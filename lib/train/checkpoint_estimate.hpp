#pragma once
// What one sharded checkpoint save costs each rank (train/sharded_checkpoint.hpp), for the dry
// run: every element of the model is written once, as fp32 weight + exp_avg + exp_avg_sq
// (12 bytes), by the rank owning it in the distributed optimizer's division: the dense state
// split over the pool (dp x cp ranks), each EP rank's experts split over its
// expert-data-parallel group (world / (etp x ep) ranks). Under tensor parallelism each TP
// rank's pool writes that rank's 1/tp of the split dense tensors and TP rank 0's pool also the
// tensors every TP rank holds whole (norms, routers), so its ranks write the most. The largest
// rank's bytes over an assumed per-rank write bandwidth give the modelled save time (ranks write in
// parallel; a file system whose aggregate bandwidth is lower than ranks x the per-rank figure makes
// it longer).

#include <cstdint>
#include <string>

#include "config/config_container.hpp"

namespace dyncp::train {

// The assumed write bandwidth of one rank into checkpoint.save: a parallel file system
// client or a local NVMe drive sustains a few GB/s per process; the model uses 2 GB/s.
inline constexpr double assumed_write_bytes_per_second_per_rank = 2e9;

struct CheckpointEstimate {
  std::int64_t world_size = 1;
  std::int64_t pool = 1;  // world / tp
  std::int64_t expert_data_parallel = 1;
  double largest_rank_bytes = 0;  // the rank writing the most
  double total_bytes = 0;         // the whole checkpoint's shards
  double modelled_seconds() const {
    return largest_rank_bytes / assumed_write_bytes_per_second_per_rank;
  }
};

CheckpointEstimate estimate_checkpoint(const config::ConfigContainer& config);

// The dry run's two lines, for sharded saves (checkpoint.sharded) or the single writer:
//   checkpoint save per rank: 0.7 MiB of 2.9 MiB (fp32 weights and both Adam moments; ...)
//   modelled save time:        0.00 s at 2 GB/s per rank, every rank writing in parallel ...
std::string format_checkpoint_estimate(const CheckpointEstimate& estimate, bool sharded);

}  // namespace dyncp::train
