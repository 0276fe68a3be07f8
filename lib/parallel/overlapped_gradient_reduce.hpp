#pragma once
// ddp.overlap_grad_reduce: gradients summed in buckets while the step's last backward is still
// running (docs/dist.md, "Overlapped gradient reduction").
//
// Buckets are planned once from the tensor list: tensors ordered by the layer whose backward
// finishes them (the last layers first; the final norm and an untied LM head before every layer,
// the embedding, and a tied LM head with it, last), one kind per bucket (dense over the pool,
// experts over the expert-data-parallel group), at most `bucket_elements` elements each unless
// one tensor is larger. Every rank plans the same buckets and starts them in the same order.
// With the distributed optimizer (`owners` given) each span is cut where the optimizer's pieces
// change hands and each part is reduced to the rank owning it (a reduce-scatter cut by layers:
// parallel/optimizer_shards.hpp); without it every span is all-reduced.
//
// During the last microbatch's backward, layer_done(l) starts every bucket whose tensors are
// all final once layer l's backward has run; finish() starts the rest and waits for all of them:
//  - device gradients: each bucket's spans are summed in place over NCCL on the
//    communicators' own streams, each behind an event on the compute stream; finish() orders
//    the compute stream after them by events (no host wait);
//  - host gradients: a communication thread sums each bucket with MpiComm's blocking
//    collectives on communicators split for it, while the backward goes on; finish() waits
//    for that thread.
// Each element's sum is the same whatever the bucketing (rank order, elementwise), so the result
// is bitwise what parallel::GradientSync (all-reduce) or ShardedStateSync::reduce_scatter
// (the owners' pieces) computes.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "parallel/communication_thread.hpp"
#include "parallel/optimizer_shards.hpp"
#include "parallel/tensor_parallel_gradients.hpp"

namespace dyncp::parallel {

struct GradientSpan {
  std::int64_t offset = 0;  // elements into all_grads() (or all_values())
  std::int64_t count = 0;
  // The group rank whose optimizer piece holds the span (distributed optimizer); -1: every rank.
  int owner = -1;
};

struct GradientBucket {
  bool is_expert = false;
  // Ready once the backward of this layer has run: num_layers for the head's tensors (ready
  // at the first layer_done), -1 for the embedding's (ready only at finish). The same number
  // says which forward first reads the bucket's parameters (-1: the embedding's, num_layers:
  // the final norm and head's): parallel/overlapped_parameter_gather.hpp.
  std::int64_t ready_after_layer = -1;
  std::vector<GradientSpan> spans;  // adjacent tensors merged (and cut at owners)
  std::int64_t elements = 0;
};

// Layer index from an HF name "...layers.{l}...."; -1 for a tensor outside the layers.
std::int64_t layer_index_of(const std::string& hf_name);

// In the backward's order (last layers first). `owners`: cut spans at the distributed
// optimizer's pieces.
std::vector<GradientBucket> plan_gradient_buckets(const model::Qwen3MoeParameters& parameters,
                                                  std::int64_t bucket_elements,
                                                  const OptimizerShards* owners = nullptr);

class OverlappedGradientReduce {
 public:
  // Splits `pool` and `expert_data_parallel` (collective: every rank constructs one).
  // `owners`: the distributed optimizer's shards (planned for these groups): reduce each span
  // to its owner instead of all-reducing it.
  OverlappedGradientReduce(const model::Qwen3MoeParameters& parameters, dist::Comm& pool,
                           dist::Comm& expert_data_parallel, std::int64_t bucket_elements,
                           const OptimizerShards* owners = nullptr);
  ~OverlappedGradientReduce();
  OverlappedGradientReduce(const OverlappedGradientReduce&) = delete;
  OverlappedGradientReduce& operator=(const OverlappedGradientReduce&) = delete;

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Tensor parallelism: a bucket's TP-partial gradients are summed over `tensor_parallel`
  // (on the calling thread) before the bucket starts.
  void set_tensor_parallel(dist::Comm& tensor_parallel, const ParameterPartition& partition,
                           const core::Tensor& all_grads);
  bool reduces_to_owners() const { return to_owners_; }

  // Starts a step's reduction: no bucket started yet.
  void begin();
  // The backward of `layer` has run in the step's last microbatch.
  void layer_done(std::int64_t layer);
  // Starts what is left and waits (device: by events on the compute stream).
  void finish();
  // Buckets started by layer_done calls (before finish) in the last step: the overlap that ran.
  std::int64_t started_during_backward() const { return started_during_backward_; }
  // What the split communicators moved (the step's bytes include them).
  dist::CommCounters counters() const;

 private:
  void start(std::size_t bucket);
  std::unique_ptr<TensorParallelGradientSum> tensor_parallel_sum_;
  core::Tensor all_grads_;
  void reduce_on_host(const GradientBucket& bucket);
  dist::Comm& comm_of(const GradientBucket& bucket) {
    return bucket.is_expert ? *expert_data_parallel_ : *pool_;
  }

  std::vector<GradientBucket> buckets_;
  bool to_owners_ = false;
  float* gradients_;
  core::Device device_;
  std::unique_ptr<dist::Comm> pool_;
  std::unique_ptr<dist::Comm> expert_data_parallel_;
  std::size_t next_ = 0;
  std::int64_t started_during_backward_ = 0;

  // Device reduces to owners, until finish(): the communicator and its handle.
  std::vector<std::pair<dist::Comm*, dist::Comm::Pending>> started_;
  std::vector<float> staging_;                 // host all-reduces of several spans
  std::optional<CommunicationThread> thread_;  // host gradients
};

}  // namespace dyncp::parallel
