#include "parallel/overlapped_gradient_reduce.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"

namespace dyncp::parallel {

std::int64_t layer_index_of(const std::string& hf_name) {
  static const std::string marker = "layers.";
  const auto at = hf_name.find(marker);
  if (at == std::string::npos) return -1;
  std::size_t i = at + marker.size();
  if (i >= hf_name.size() || hf_name[i] < '0' || hf_name[i] > '9') return -1;
  std::int64_t index = 0;
  for (; i < hf_name.size() && hf_name[i] >= '0' && hf_name[i] <= '9'; ++i)
    index = index * 10 + (hf_name[i] - '0');
  return index;
}

namespace {

struct Piece {
  std::int64_t offset;
  std::int64_t count;
  bool is_expert;
  std::int64_t ready;
};

// When the backward has finished a tensor's gradient: after its layer; the head's (final norm,
// untied LM head) before every layer; the embedding's (and a tied head's) only at the end.
std::int64_t ready_after(const std::string& name, std::int64_t layers) {
  const std::int64_t layer = layer_index_of(name);
  if (layer >= 0) return layer;
  if (name.find("embed_tokens") != std::string::npos) return -1;
  if (name == "lm_head.weight" || name.find("model.norm.") != std::string::npos) return layers;
  return -1;
}

}  // namespace

std::vector<GradientBucket> plan_gradient_buckets(const model::Qwen3MoeParameters& parameters,
                                                  std::int64_t bucket_elements,
                                                  const OptimizerShards* owners) {
  DYNCP_CHECK(bucket_elements > 0, "a gradient bucket holds at least one element");
  const auto* base = static_cast<const float*>(parameters.all_grads().raw_data());
  const std::int64_t layers = parameters.architecture().num_hidden_layers;
  std::map<std::int64_t, Piece> by_offset;  // a tied head shares the embedding's storage
  for (const model::HfTensor& tensor : parameters.hf_tensors()) {
    const auto offset =
        static_cast<std::int64_t>(static_cast<const float*>(tensor.grad.raw_data()) - base);
    const std::int64_t ready = ready_after(tensor.name, layers);
    auto [it, inserted] =
        by_offset.try_emplace(offset, Piece{offset, tensor.grad.numel(), tensor.is_expert, ready});
    if (!inserted) it->second.ready = std::min(it->second.ready, ready);
  }
  std::vector<Piece> pieces;
  for (const auto& [offset, piece] : by_offset) pieces.push_back(piece);
  // Last layers first; inside a layer, from the end of the buffer (the backward's own order).
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.ready != b.ready ? a.ready > b.ready : a.offset > b.offset;
  });
  std::vector<GradientBucket> buckets;
  for (const bool experts : {false, true}) {
    GradientBucket open;
    open.is_expert = experts;
    const auto close = [&] {
      if (open.elements == 0) return;
      buckets.push_back(open);
      open = GradientBucket{};
      open.is_expert = experts;
    };
    for (const Piece& piece : pieces) {
      if (piece.is_expert != experts || piece.count == 0) continue;
      if (open.elements > 0 && open.elements + piece.count > bucket_elements) close();
      if (open.spans.empty()) open.ready_after_layer = piece.ready;
      open.ready_after_layer = std::min(open.ready_after_layer, piece.ready);
      GradientSpan* last = open.spans.empty() ? nullptr : &open.spans.back();
      if (last != nullptr && piece.offset + piece.count == last->offset) {
        last->offset = piece.offset;  // walking down the buffer: extend the span downwards
        last->count += piece.count;
      } else {
        open.spans.push_back({piece.offset, piece.count});
      }
      open.elements += piece.count;
    }
    close();
  }
  // One start order for every rank: by readiness (the dense buckets of a layer before its
  // experts'), each kind keeping its planned order.
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const GradientBucket& a, const GradientBucket& b) {
                     return a.ready_after_layer > b.ready_after_layer;
                   });
  if (owners != nullptr) {
    for (GradientBucket& bucket : buckets) {
      const KindShards& kind = bucket.is_expert ? owners->expert : owners->dense;
      std::vector<GradientSpan> cut;
      for (const GradientSpan& span : bucket.spans) {
        kind.for_each_owner_run(span.offset, span.count,
                                [&](std::int64_t offset, std::int64_t count, int owner) {
                                  cut.push_back({offset, count, owner});
                                });
      }
      bucket.spans = std::move(cut);
    }
  }
  return buckets;
}

OverlappedGradientReduce::OverlappedGradientReduce(const model::Qwen3MoeParameters& parameters,
                                                   dist::Comm& pool,
                                                   dist::Comm& expert_data_parallel,
                                                   std::int64_t bucket_elements,
                                                   const OptimizerShards* owners)
    : buckets_(plan_gradient_buckets(parameters, bucket_elements, owners)),
      to_owners_(owners != nullptr),
      gradients_(parameters.all_grads().data<float>()),
      device_(parameters.device()),
      pool_(pool.split(0, pool.rank(), pool.name() + ".grad_overlap")),
      expert_data_parallel_(expert_data_parallel.split(
          0, expert_data_parallel.rank(), expert_data_parallel.name() + ".grad_overlap")) {
  if (owners != nullptr) {
    DYNCP_CHECK(owners->dense.shards() == pool.size() &&
                    owners->expert.shards() == expert_data_parallel.size(),
                "the optimizer's shards are planned for the pool and the expert-DP group");
  }
  if (device_ == core::Device::cpu) {
    std::int64_t largest = 0;
    for (const GradientBucket& bucket : buckets_) largest = std::max(largest, bucket.elements);
    if (!to_owners_) staging_.resize(static_cast<std::size_t>(largest));
    thread_.emplace();
  }
}

OverlappedGradientReduce::~OverlappedGradientReduce() = default;

dist::CommCounters OverlappedGradientReduce::counters() const {
  dist::CommCounters sum = pool_->counters();
  sum += expert_data_parallel_->counters();
  return sum;
}

void OverlappedGradientReduce::begin() {
  next_ = 0;
  started_during_backward_ = 0;
  if (tensor_parallel_sum_) tensor_parallel_sum_->begin_step();
}

void OverlappedGradientReduce::layer_done(std::int64_t layer) {
  while (next_ < buckets_.size() && buckets_[next_].ready_after_layer >= layer) {
    start(next_++);
    ++started_during_backward_;
  }
}

void OverlappedGradientReduce::set_tensor_parallel(dist::Comm& tensor_parallel,
                                                   const ParameterPartition& partition,
                                                   const core::Tensor& all_grads) {
  all_grads_ = all_grads;
  tensor_parallel_sum_ =
      std::make_unique<TensorParallelGradientSum>(partition, tensor_parallel, all_grads.device());
}

void OverlappedGradientReduce::start(std::size_t index) {
  const GradientBucket& bucket = buckets_[index];
  if (tensor_parallel_sum_) {
    for (const GradientSpan& span : bucket.spans)
      tensor_parallel_sum_->sum_touching(all_grads_, span.offset, span.offset + span.count);
  }
  dist::Comm& comm = comm_of(bucket);
  if (comm.size() == 1) return;
  if (device_ == core::Device::cpu) {
    thread_->post([this, &bucket] { reduce_on_host(bucket); });
    return;
  }
  for (const GradientSpan& span : bucket.spans) {
    const auto count = static_cast<std::size_t>(span.count);
    if (to_owners_) {
      started_.push_back(
          {&comm, comm.start_reduce(gradients_ + span.offset, count, core::DType::f32,
                                    dist::ReduceOp::sum, span.owner)});
    } else {
      comm.start_all_reduce(gradients_ + span.offset, count, core::DType::f32, dist::ReduceOp::sum);
    }
  }
}

void OverlappedGradientReduce::reduce_on_host(const GradientBucket& bucket) {
  dist::Comm& comm = comm_of(bucket);
  if (to_owners_) {
    for (const GradientSpan& span : bucket.spans)
      comm.reduce(gradients_ + span.offset, static_cast<std::size_t>(span.count), core::DType::f32,
                  dist::ReduceOp::sum, span.owner);
    return;
  }
  if (bucket.spans.size() == 1) {
    const GradientSpan& span = bucket.spans.front();
    comm.all_reduce(gradients_ + span.offset, gradients_ + span.offset,
                    static_cast<std::size_t>(span.count), core::DType::f32, dist::ReduceOp::sum);
    return;
  }
  float* staging = staging_.data();
  std::int64_t at = 0;
  for (const GradientSpan& span : bucket.spans) {
    std::memcpy(staging + at, gradients_ + span.offset,
                static_cast<std::size_t>(span.count) * sizeof(float));
    at += span.count;
  }
  comm.all_reduce(staging, staging, static_cast<std::size_t>(at), core::DType::f32,
                  dist::ReduceOp::sum);
  at = 0;
  for (const GradientSpan& span : bucket.spans) {
    std::memcpy(gradients_ + span.offset, staging + at,
                static_cast<std::size_t>(span.count) * sizeof(float));
    at += span.count;
  }
}

void OverlappedGradientReduce::finish() {
  while (next_ < buckets_.size()) start(next_++);
  if (device_ == core::Device::cpu) {
    thread_->wait_all();
    return;
  }
  // The consumers (norm, clip, optimizer) run on the compute stream: it waits, the host not.
  for (auto& [comm, pending] : started_) comm->order_compute_after(pending);
  started_.clear();
  pool_->order_compute_after_started();
  expert_data_parallel_->order_compute_after_started();
}

}  // namespace dyncp::parallel
