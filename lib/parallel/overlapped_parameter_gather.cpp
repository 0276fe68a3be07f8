#include "parallel/overlapped_parameter_gather.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dyncp::parallel {

OverlappedParameterGather::OverlappedParameterGather(const model::Qwen3MoeParameters& parameters,
                                                     const OptimizerShards& shards,
                                                     dist::Comm& pool,
                                                     dist::Comm& expert_data_parallel,
                                                     std::int64_t bucket_elements)
    : buckets_(plan_gradient_buckets(parameters, bucket_elements, &shards)),
      values_(parameters.all_values().data<float>()),
      device_(parameters.device()),
      pool_(pool.split(0, pool.rank(), pool.name() + ".param_gather")),
      expert_data_parallel_(expert_data_parallel.split(
          0, expert_data_parallel.rank(), expert_data_parallel.name() + ".param_gather")) {
  DYNCP_CHECK(
      shards.dense.shards() == pool.size() && shards.expert.shards() == expert_data_parallel.size(),
      "the optimizer's shards are planned for the pool and the expert-DP group");
  // The forward reads the embedding's parameters first and the head's last.
  std::stable_sort(buckets_.begin(), buckets_.end(),
                   [](const GradientBucket& a, const GradientBucket& b) {
                     return a.ready_after_layer < b.ready_after_layer;
                   });
  handles_.resize(buckets_.size());
  tickets_.resize(buckets_.size());
  if (device_ == core::Device::cpu) thread_.emplace();
}

OverlappedParameterGather::~OverlappedParameterGather() {
  // Nothing may still write the parameters once they are gone (an error path: a step that
  // threw between start and the forward's waits).
  if (pending() && thread_) thread_->wait_all();
}

void OverlappedParameterGather::start() {
  DYNCP_CHECK(!pending(), "the previous parameter gather was waited for before the next starts");
  waited_by_layer_ = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    dist::Comm& comm = comm_of(bucket);
    if (comm.size() == 1) continue;  // this rank owns every piece: nothing to gather
    // A broadcast's logical bytes (dist/comm.hpp): the owner sends its part to every other
    // rank, each of them receives it once.
    dist::OpCounter& counted = started_counters_[dist::CommOp::broadcast];
    for (const GradientSpan& span : bucket.spans) {
      const auto bytes = static_cast<std::uint64_t>(span.count) * sizeof(float);
      ++counted.calls;
      if (span.owner == comm.rank()) {
        counted.bytes_sent += bytes * static_cast<std::uint64_t>(comm.size() - 1);
      } else {
        counted.bytes_received += bytes;
      }
    }
    if (device_ == core::Device::cpu) {
      tickets_[b] = thread_->post([this, &bucket] { broadcast_on_host(bucket); });
      continue;
    }
    for (const GradientSpan& span : bucket.spans) {
      handles_[b].push_back(
          {&comm, comm.start_broadcast(values_ + span.offset, static_cast<std::size_t>(span.count),
                                       core::DType::f32, span.owner)});
    }
  }
  started_buckets_ = buckets_.size();
  next_wait_ = 0;
}

void OverlappedParameterGather::broadcast_on_host(const GradientBucket& bucket) {
  dist::Comm& comm = comm_of(bucket);
  for (const GradientSpan& span : bucket.spans)
    comm.broadcast(values_ + span.offset, static_cast<std::size_t>(span.count), core::DType::f32,
                   span.owner);
}

void OverlappedParameterGather::wait_for(std::size_t bucket) {
  if (device_ == core::Device::cpu) {
    if (tickets_[bucket] != 0) thread_->wait_until(tickets_[bucket]);
    tickets_[bucket] = 0;
    return;
  }
  // The compute stream waits for the bucket's broadcasts; the host goes on.
  for (auto& [comm, handle] : handles_[bucket]) comm->order_compute_after(handle);
  handles_[bucket].clear();
}

void OverlappedParameterGather::wait_for_layer(std::int64_t layer) {
  while (next_wait_ < started_buckets_ && buckets_[next_wait_].ready_after_layer <= layer) {
    wait_for(next_wait_++);
    ++waited_by_layer_;
  }
}

void OverlappedParameterGather::wait_all() {
  while (next_wait_ < started_buckets_) wait_for(next_wait_++);
}

}  // namespace dyncp::parallel
