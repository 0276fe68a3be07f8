#pragma once
// ddp.overlap_grad_reduce: gradients summed in buckets while the step's last backward is still
// running (docs/dist.md, "Overlapped gradient reduction").
//
// Buckets are planned once from the tensor list: tensors ordered by the layer whose backward
// finishes them (the last layers first; the final norm and an untied LM head before every layer,
// the embedding, and a tied LM head with it, last), one kind per bucket (dense over the pool,
// experts over the expert-data-parallel group), at most `bucket_elements` elements each unless
// one tensor is larger. Every rank plans the same buckets and starts them in the same order.
//
// During the last microbatch's backward, layer_done(l) starts every bucket whose tensors are
// all final once layer l's backward has run; finish() starts the rest and waits for all of them:
//  - device gradients: each bucket's contiguous spans are summed in place over NCCL on the
//    communicators' own streams, each behind an event on the compute stream; finish() orders
//    the compute stream after the last one by an event (no host wait);
//  - host gradients: a communication thread of this class sums each bucket (packed into one
//    staging buffer) with MpiComm's blocking collectives on communicators split for it, while
//    the backward goes on; finish() waits for that thread to empty its queue.
// Each element's sum is the same whatever the bucketing (rank order, elementwise), so the result
// is bitwise what parallel::GradientSync computes.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.hpp"
#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "parallel/tensor_parallel_gradients.hpp"

namespace dyncp::parallel {

struct GradientSpan {
  std::int64_t offset = 0;  // elements into all_grads()
  std::int64_t count = 0;
};

struct GradientBucket {
  bool is_expert = false;
  // Ready once the backward of this layer has run: num_layers for the head's tensors (ready
  // at the first layer_done), -1 for the embedding's (ready only at finish).
  std::int64_t ready_after_layer = -1;
  std::vector<GradientSpan> spans;  // adjacent tensors merged
  std::int64_t elements = 0;
};

// Layer index from an HF name "...layers.{l}...."; -1 for a tensor outside the layers.
std::int64_t layer_index_of(const std::string& hf_name);

std::vector<GradientBucket> plan_gradient_buckets(const model::Qwen3MoeParameters& parameters,
                                                  std::int64_t bucket_elements);

class OverlappedGradientReduce {
 public:
  // Splits `pool` and `expert_data_parallel` (collective: every rank constructs one).
  OverlappedGradientReduce(const model::Qwen3MoeParameters& parameters, dist::Comm& pool,
                           dist::Comm& expert_data_parallel, std::int64_t bucket_elements);
  ~OverlappedGradientReduce();
  OverlappedGradientReduce(const OverlappedGradientReduce&) = delete;
  OverlappedGradientReduce& operator=(const OverlappedGradientReduce&) = delete;

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Tensor parallelism: a bucket's TP-partial gradients are summed over `tensor_parallel`
  // (on the calling thread) before the bucket starts.
  void set_tensor_parallel(dist::Comm& tensor_parallel, const ParameterPartition& partition,
                           const core::Tensor& all_grads);

  // Starts a step's reduction: no bucket started yet.
  void begin();
  // The backward of `layer` has run in the step's last microbatch.
  void layer_done(std::int64_t layer);
  // Starts what is left and waits (device: by an event on the compute stream).
  void finish();
  // Buckets started by layer_done calls (before finish) in the last step: the overlap that ran.
  std::int64_t started_during_backward() const { return started_during_backward_; }

 private:
  void start(std::size_t bucket);
  std::unique_ptr<TensorParallelGradientSum> tensor_parallel_sum_;
  core::Tensor all_grads_;
  void reduce_on_host(const GradientBucket& bucket);
  void communication_thread();

  std::vector<GradientBucket> buckets_;
  float* gradients_;
  core::Device device_;
  std::unique_ptr<dist::Comm> pool_;
  std::unique_ptr<dist::Comm> expert_data_parallel_;
  std::size_t next_ = 0;
  std::int64_t started_during_backward_ = 0;
  bool finishing_ = false;

  // Host gradients: the communication thread and its queue of bucket indices.
  std::vector<float> staging_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::size_t> queue_;
  std::size_t queued_done_ = 0;
  std::size_t queued_total_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace dyncp::parallel
