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
//
// Buffers live on the host or on the device (a GPU run: parameters, gradients and moments in
// device memory). Device buffers stage through device buckets: the pieces move by device
// copies (one per contiguous segment), the collectives take the communicators' device channel
// (NCCL, whose sums are MpiComm's bits), and only one Σ g² per owned range crosses to the host.
// Host buffers (the checkpoint's full-size moments) stage through host buckets over the host
// channel, so a GPU run gathers and scatters its checkpoint state through host copies.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "parallel/optimizer_shards.hpp"
#include "parallel/overlapped_parameter_gather.hpp"
#include "parallel/tensor_parallel_gradients.hpp"

namespace dyncp::parallel {

class ShardedStateSync {
 public:
  // `pool` and `expert_data_parallel` must be the groups `shards` was planned for (their
  // sizes and this rank's places in them).
  ShardedStateSync(OptimizerShards shards, dist::Comm& pool, dist::Comm& expert_data_parallel,
                   std::int64_t bucket_elements = std::int64_t{4} << 20);
  ~ShardedStateSync();

  const OptimizerShards& shards() const { return shards_; }

  // Tensor parallelism: reduce_scatter first sums the TP-partial gradients over
  // `tensor_parallel` (parallel/tensor_parallel_gradients.hpp), and the norm adds the TP ranks'
  // pieces of split tensors and of the experts.
  void set_tensor_parallel(dist::Comm& tensor_parallel, const ParameterPartition& partition,
                           core::Device device);

  // Sums an f32 buffer laid out like all_grads() over each kind's group. Afterwards this rank's
  // owned pieces hold the sums; its other positions keep partial values and must not be used.
  void reduce_scatter(const core::Tensor& gradients);

  // Σ g² over this rank's owned pieces, summed over the pool: every element of the model
  // counted once; identical on every rank. Call after reduce_scatter. One sum per owned range
  // (ops::sum_of_squares, on the buffer's device), added in owned_ranges order on the host.
  double global_sum_of_squares(const core::Tensor& gradients);

  // Writes every rank's pieces into `flat` (f32, laid out like all_values()), over each kind's
  // group. The local piece comes from `flat` itself at the owned positions, or, when
  // `owned_values` is given (on flat's device), from a packed buffer of owned_elements values
  // in owned_ranges order (the optimizer's moments). Completes a pending parameter gather
  // first.
  void all_gather(const core::Tensor& flat, const core::Tensor& owned_values = {});

  // ddp.overlap_param_gather: the parameters' all-gather after each optimizer step runs in
  // buckets beside the next forward (parallel/overlapped_parameter_gather.hpp), built by the
  // step engine for the model's parameters.
  void overlap_parameter_gather(std::unique_ptr<OverlappedParameterGather> gather);
  OverlappedParameterGather* overlapped_parameter_gather() { return parameter_gather_.get(); }
  // The optimizer's updated pieces to every rank's parameter buffer `values` (all_values()):
  // started in buckets when overlapped (the forward and complete_parameter_gather wait), else
  // all_gather(values).
  void gather_parameters(const core::Tensor& values);
  // Waits for a started parameter gather (a no-op when none is pending): every reader of the
  // parameters other than the forward calls it first.
  void complete_parameter_gather();

 private:
  // Staging buckets on one device: `many` holds shards blocks (reduce-scatter send, all-gather
  // receive), `one` one block (reduce-scatter receive, all-gather send).
  struct Buckets {
    core::Tensor many;
    core::Tensor one;
  };
  Buckets& buckets(core::Device device);
  std::int64_t block_elements(const KindShards& kind) const;
  void reduce_scatter_kind(const KindShards& kind, dist::Comm& comm, const core::Tensor& flat);
  void all_gather_kind(const KindShards& kind, dist::Comm& comm, const core::Tensor& flat,
                       const float* owned_values);

  OptimizerShards shards_;
  dist::Comm& pool_;
  dist::Comm& expert_data_parallel_;
  std::int64_t bucket_elements_;
  std::int64_t many_elements_ = 0;
  std::int64_t one_elements_ = 0;
  Buckets host_buckets_;
  Buckets device_buckets_;                       // allocated on the first device call
  std::unique_ptr<core::Arena> device_scratch_;  // ops::sum_of_squares on the device
  dist::Comm* tensor_parallel_ = nullptr;
  std::unique_ptr<TensorParallelGradientSum> tensor_parallel_sum_;
  std::unique_ptr<OverlappedParameterGather> parameter_gather_;
};

}  // namespace dyncp::parallel
