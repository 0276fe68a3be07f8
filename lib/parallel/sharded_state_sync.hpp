#pragma once
// The collectives of the distributed optimizer (parallel::OptimizerShards): gradients are
// reduce-scattered so that each rank receives its piece summed over the kind's group (dense:
// the pool; experts: the expert-data-parallel group), the optimizer updates that piece, and
// the updated pieces are all-gathered back into every rank's parameter buffer.
//
// Pieces are not contiguous in the flat buffers (dense and expert tensors alternate layer by
// layer), so each collective goes through a staging bucket: round k carries elements
// [k B, (k + 1) B) of every rank's piece, zero-padded where a piece is shorter, with
// B = bucket_elements / shards (at most the largest piece). Memory stays bounded by the bucket
// whatever the model size, and the pieces' ownership does not depend on the bucket size.
//
// The sums are the all-reduce's sums: MpiComm adds in rank order in both collectives, so a
// rank's piece of the gradient is bitwise what the replicated path (parallel::GradientSync)
// computes there.

#include <cstdint>
#include <vector>

#include "dist/comm.hpp"
#include "parallel/optimizer_shards.hpp"

namespace dyncp::parallel {

class ShardedStateSync {
 public:
  // `pool` and `expert_data_parallel` must be the groups `shards` was planned for (their
  // sizes and this rank's places in them).
  ShardedStateSync(OptimizerShards shards, dist::Comm& pool, dist::Comm& expert_data_parallel,
                   std::int64_t bucket_elements = std::int64_t{4} << 20);

  const OptimizerShards& shards() const { return shards_; }

  // Sums a buffer laid out like all_grads() over each kind's group. Afterwards this rank's
  // owned pieces hold the sums; its other positions keep partial values and must not be used.
  void reduce_scatter(float* gradients);

  // Σ g² over this rank's owned pieces, summed over the pool: every element of the model
  // counted once; identical on every rank. Call after reduce_scatter.
  double global_sum_of_squares(const float* gradients);

  // Writes every rank's pieces into `flat` (laid out like all_values()), over each kind's
  // group. The local piece comes from `flat` itself at the owned positions, or, when
  // `owned_values` is given, from a packed buffer of owned_elements values in owned_ranges
  // order (the optimizer's moments).
  void all_gather(float* flat, const float* owned_values = nullptr);

 private:
  std::int64_t block_elements(const KindShards& kind) const;
  void reduce_scatter_kind(const KindShards& kind, dist::Comm& comm, float* flat);
  void all_gather_kind(const KindShards& kind, dist::Comm& comm, float* flat,
                       const float* owned_values);

  OptimizerShards shards_;
  dist::Comm& pool_;
  dist::Comm& expert_data_parallel_;
  std::int64_t bucket_elements_;
  std::vector<float> many_;  // shards blocks: reduce-scatter send, all-gather receive
  std::vector<float> one_;   // one block: reduce-scatter receive, all-gather send
};

}  // namespace dyncp::parallel
