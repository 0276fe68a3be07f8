#include "parallel/gradient_sync.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "ops/grad_norm.hpp"

namespace dyncp::parallel {

GradientSync::GradientSync(const ParameterPartition& partition, float* gradients, dist::Comm& pool,
                           dist::Comm& expert_data_parallel, dist::Comm& expert_parallel,
                           std::int64_t bucket_elements)
    : partition_(partition),
      gradients_(gradients),
      pool_(pool),
      expert_data_parallel_(expert_data_parallel),
      expert_parallel_(expert_parallel) {
  const std::int64_t largest = std::max(partition.dense_elements, partition.expert_elements);
  bucket_.resize(static_cast<std::size_t>(std::min(bucket_elements, largest)));
  packed_.reserve(partition.ranges.size());
}

void GradientSync::set_device(core::Device device) {
  device_ = device;
  if (device == core::Device::cuda && !device_scratch_)
    device_scratch_ = std::make_unique<core::Arena>("gradient_sync.scratch", 1 << 20, device);
}

void GradientSync::set_tensor_parallel(dist::Comm& tensor_parallel,
                                       dist::Comm& expert_tensor_parallel,
                                       const core::Tensor& all_grads) {
  tensor_parallel_ = &tensor_parallel;
  expert_tensor_parallel_ = &expert_tensor_parallel;
  all_grads_ = all_grads;
  tensor_parallel_sum_ =
      std::make_unique<TensorParallelGradientSum>(partition_, tensor_parallel, device_);
}

void GradientSync::reduce_spans_in_place(bool experts, dist::Comm& comm) {
  // Ranges are in ascending offsets; a run of one kind's ranges is one span (the alignment
  // gaps between them belong to no parameter and are never read).
  std::int64_t begin = -1;
  std::int64_t end = -1;
  const auto flush = [&] {
    if (end > begin && begin >= 0) {
      comm.all_reduce(gradients_ + begin, gradients_ + begin, static_cast<std::size_t>(end - begin),
                      core::DType::f32, dist::ReduceOp::sum);
    }
    begin = end = -1;
  };
  for (const ParameterRange& range : partition_.ranges) {
    if (range.count == 0) continue;
    if (range.is_expert != experts) {
      flush();
      continue;
    }
    if (begin < 0) begin = range.offset;
    end = range.offset + range.count;
  }
  flush();
}

void GradientSync::reduce_kind(bool experts, dist::Comm& comm) {
  if (comm.size() == 1) return;
  // Device gradients: sums in place over whole spans, no bucket copies (each element's sum is
  // the same however the elements are grouped into calls, so the result equals the CPU path's).
  if (device_ != core::Device::cpu) {
    reduce_spans_in_place(experts, comm);
    return;
  }
  const auto bucket_size = static_cast<std::int64_t>(bucket_.size());
  float* bucket = bucket_.data();
  std::vector<const ParameterRange*>& packed = packed_;  // ranges waiting in the bucket
  packed.clear();
  std::int64_t used = 0;
  const auto flush = [&] {
    if (used == 0) return;
    comm.all_reduce(bucket, bucket, static_cast<std::size_t>(used), core::DType::f32,
                    dist::ReduceOp::sum);
    std::int64_t at = 0;
    for (const ParameterRange* range : packed) {
      std::memcpy(gradients_ + range->offset, bucket + at,
                  static_cast<std::size_t>(range->count) * sizeof(float));
      at += range->count;
    }
    packed.clear();
    used = 0;
  };
  for (const ParameterRange& range : partition_.ranges) {
    if (range.is_expert != experts) continue;
    if (range.count >= bucket_size) {
      comm.all_reduce(gradients_ + range.offset, gradients_ + range.offset,
                      static_cast<std::size_t>(range.count), core::DType::f32, dist::ReduceOp::sum);
      continue;
    }
    if (used + range.count > bucket_size) flush();
    std::memcpy(bucket + used, gradients_ + range.offset,
                static_cast<std::size_t>(range.count) * sizeof(float));
    packed.push_back(&range);
    used += range.count;
  }
  flush();
}

void GradientSync::reduce_gradients() {
  if (tensor_parallel_sum_) tensor_parallel_sum_->sum(all_grads_);
  reduce_kind(/*experts=*/false, pool_);
  reduce_kind(/*experts=*/true, expert_data_parallel_);
}

double GradientSync::global_sum_of_squares() {
  double dense = 0.0;
  double dense_split = 0.0;  // pieces of tensors split over TP: summed over it
  double expert = 0.0;
  ops::OpContext device_context;
  device_context.device = device_;
  device_context.scratch = device_scratch_.get();
  for (const ParameterRange& range : partition_.ranges) {
    if (range.tied_copy) continue;
    double sum = 0.0;
    const float* g = gradients_ + range.offset;
    if (device_ == core::Device::cpu) {
      for (std::int64_t i = 0; i < range.count; ++i) sum += static_cast<double>(g[i]) * g[i];
    } else {
      sum = ops::sum_of_squares(
          device_context,
          core::Tensor::view_of(const_cast<float*>(g), {range.count}, core::DType::f32, device_));
    }
    (range.is_expert                                      ? expert
     : range.split == model::TensorSplit::tensor_parallel ? dense_split
                                                          : dense) += sum;
  }
  // Each EP rank holds different experts; replicas in the expert-DP group agree after reduce.
  expert_parallel_.all_reduce(&expert, &expert, 1, core::DType::f64, dist::ReduceOp::sum);
  // Under tensor parallelism the TP ranks hold different pieces of the split tensors (and of
  // every expert with etp > 1) and the same whole tensors.
  if (tensor_parallel_ != nullptr && tensor_parallel_->size() > 1) {
    tensor_parallel_->all_reduce(&dense_split, &dense_split, 1, core::DType::f64,
                                 dist::ReduceOp::sum);
    if (expert_tensor_parallel_->size() > 1)
      expert_tensor_parallel_->all_reduce(&expert, &expert, 1, core::DType::f64,
                                          dist::ReduceOp::sum);
  }
  return dense + dense_split + expert;
}

}  // namespace dyncp::parallel
