#pragma once
// ddp.overlap_param_gather (with the distributed optimizer): the parameter all-gather after the
// optimizer step runs in buckets while the NEXT forward runs, layer by layer (docs/dist.md,
// "Overlapped parameter gather").
//
// The buckets are the overlapped gradient reduction's (plan_gradient_buckets with the
// optimizer's owners: spans of one kind, cut where the optimizer's pieces change hands), taken
// in the forward's order: the embedding's first, then layer 0's, ..., the final norm and head's
// last. Each span is broadcast from the rank owning it over the kind's group (dense: the pool,
// experts: the expert-data-parallel group), on communicators split for this, in that order on
// every rank: together the broadcasts are the all-gather of ShardedStateSync::all_gather,
// moving the same values (nothing is summed, so the result is bitwise the same).
//
//   start()              after the optimizer updated this rank's pieces: every bucket started
//   wait_for_layer(l)    before the forward of layer l (-1: the embedding, num_layers: the final
//                        norm and LM head) reads its parameters: every bucket holding them
//   wait_all()           before anything else reads the parameters (evaluation, checkpoints,
//                        the HF export, the end of the run)
//
//  - device parameters: the broadcasts are enqueued on the communicators' streams behind an
//    event on the compute stream (after the optimizer's kernels); a wait makes the compute
//    stream wait for the bucket's events, the host never waits;
//  - host parameters: a communication thread runs the broadcasts (MpiComm, blocking) in order;
//    a wait returns once the thread has finished the bucket.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dist/comm.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "parallel/communication_thread.hpp"
#include "parallel/optimizer_shards.hpp"
#include "parallel/overlapped_gradient_reduce.hpp"

namespace dyncp::parallel {

class OverlappedParameterGather {
 public:
  // Splits `pool` and `expert_data_parallel` (collective). `shards` must be planned for them.
  OverlappedParameterGather(const model::Qwen3MoeParameters& parameters,
                            const OptimizerShards& shards, dist::Comm& pool,
                            dist::Comm& expert_data_parallel, std::int64_t bucket_elements);
  ~OverlappedParameterGather();
  OverlappedParameterGather(const OverlappedParameterGather&) = delete;
  OverlappedParameterGather& operator=(const OverlappedParameterGather&) = delete;

  // In the forward's order (ready_after_layer ascending).
  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // Starts every bucket (the previous start's buckets must all have been waited for).
  void start();
  // Waits for every bucket whose parameters the forward of `layer` reads, and those before it.
  void wait_for_layer(std::int64_t layer);
  void wait_all();
  // Whether a started bucket has not been waited for yet.
  bool pending() const { return next_wait_ < started_buckets_; }
  // Buckets the last start() left to wait_for_layer (rather than to wait_all): the overlap
  // that ran beside the forward.
  std::int64_t waited_by_layer() const { return waited_by_layer_; }
  // What the gathers started so far move (the step's bytes include them), counted when started,
  // on the calling thread: the host's communication thread may still be moving them.
  dist::CommCounters counters() const { return started_counters_; }

 private:
  void wait_for(std::size_t bucket);
  void broadcast_on_host(const GradientBucket& bucket);
  dist::Comm& comm_of(const GradientBucket& bucket) {
    return bucket.is_expert ? *expert_data_parallel_ : *pool_;
  }

  std::vector<GradientBucket> buckets_;
  float* values_;
  core::Device device_;
  std::unique_ptr<dist::Comm> pool_;
  std::unique_ptr<dist::Comm> expert_data_parallel_;
  std::size_t started_buckets_ = 0;  // buckets_.size() after start(), 0 before the first
  std::size_t next_wait_ = 0;
  std::int64_t waited_by_layer_ = 0;
  // Device: each bucket's started broadcasts (communicator, handle); host: its thread ticket.
  std::vector<std::vector<std::pair<dist::Comm*, dist::Comm::Pending>>> handles_;
  std::vector<std::uint64_t> tickets_;
  dist::CommCounters started_counters_;
  std::optional<CommunicationThread> thread_;
};

}  // namespace dyncp::parallel
