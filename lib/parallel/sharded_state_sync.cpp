#include "parallel/sharded_state_sync.hpp"

#include <algorithm>
#include <string>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "ops/grad_norm.hpp"

namespace dyncp::parallel {

namespace {

void require_group(const KindShards& kind, const dist::Comm& comm, const char* what) {
  DYNCP_CHECK(kind.shards() == comm.size() && kind.index() == comm.rank(),
              std::string(what) + " state is planned for shard " + std::to_string(kind.index()) +
                  " of " + std::to_string(kind.shards()) + " but communicator '" + comm.name() +
                  "' has rank " + std::to_string(comm.rank()) + " of " +
                  std::to_string(comm.size()));
}

void require_flat(const core::Tensor& flat, const char* what) {
  DYNCP_CHECK(
      flat.defined() && flat.dtype() == core::DType::f32,
      std::string("ShardedStateSync: ") + what + " is an f32 flat buffer, got " + flat.describe());
}

// Elements [from, to) of `bucket` (on the bucket's device) set to zero: the padding of a piece
// shorter than the block.
void zero_tail(const core::Tensor& bucket, float* from, float* to) {
  if (to <= from) return;
  if (bucket.device() == core::Device::cpu) {
    std::fill(from, to, 0.0f);
  } else {
    core::device_memory().set_zero(from, static_cast<std::size_t>(to - from) * sizeof(float));
  }
}

void copy_floats(const core::Tensor& bucket, float* to, const float* from, std::int64_t count) {
  if (count <= 0) return;
  if (bucket.device() == core::Device::cpu) {
    std::copy(from, from + count, to);
  } else {
    core::device_memory().copy(to, bucket.device(), from, bucket.device(),
                               static_cast<std::size_t>(count) * sizeof(float));
  }
}

}  // namespace

ShardedStateSync::ShardedStateSync(OptimizerShards shards, dist::Comm& pool,
                                   dist::Comm& expert_data_parallel, std::int64_t bucket_elements)
    : shards_(std::move(shards)),
      pool_(pool),
      expert_data_parallel_(expert_data_parallel),
      bucket_elements_(std::max<std::int64_t>(bucket_elements, 1)) {
  require_group(shards_.dense, pool_, "dense");
  require_group(shards_.expert, expert_data_parallel_, "expert");
  for (const KindShards* kind : {&shards_.dense, &shards_.expert}) {
    const std::int64_t block = block_elements(*kind);
    many_elements_ = std::max(many_elements_, block * kind->shards());
    one_elements_ = std::max(one_elements_, block);
  }
}

ShardedStateSync::~ShardedStateSync() = default;

ShardedStateSync::Buckets& ShardedStateSync::buckets(core::Device device) {
  Buckets& buckets = device == core::Device::cpu ? host_buckets_ : device_buckets_;
  if (!buckets.many.defined()) {
    buckets.many = core::Tensor::empty({many_elements_}, core::DType::f32, device);
    buckets.one = core::Tensor::empty({one_elements_}, core::DType::f32, device);
  }
  return buckets;
}

std::int64_t ShardedStateSync::block_elements(const KindShards& kind) const {
  return std::clamp<std::int64_t>(bucket_elements_ / kind.shards(), 1,
                                  std::max<std::int64_t>(kind.largest_piece(), 1));
}

void ShardedStateSync::reduce_scatter_kind(const KindShards& kind, dist::Comm& comm,
                                           const core::Tensor& flat_tensor) {
  if (comm.size() == 1 || kind.total() == 0) return;
  const core::Device device = flat_tensor.device();
  float* flat = flat_tensor.data<float>();
  const Buckets& staging = buckets(device);
  float* many = staging.many.data<float>();
  float* one = staging.one.data<float>();
  const std::int64_t largest = kind.largest_piece();
  const std::int64_t block = block_elements(kind);
  for (std::int64_t at = 0; at < largest; at += block) {
    const std::int64_t n = std::min(block, largest - at);
    for (int shard = 0; shard < kind.shards(); ++shard) {
      const ShardPiece piece = kind.piece(shard);
      const std::int64_t begin = std::min(piece.begin + at, piece.end);
      const std::int64_t end = std::min(begin + n, piece.end);
      float* slot = many + shard * n;
      kind.read(flat, begin, end, slot, device);
      zero_tail(staging.many, slot + (end - begin), slot + n);
    }
    comm.reduce_scatter(many, one, static_cast<std::size_t>(n), core::DType::f32,
                        dist::ReduceOp::sum);
    // Round k writes only sub-block k of the own piece, which no later round reads.
    const ShardPiece owned = kind.owned();
    const std::int64_t begin = std::min(owned.begin + at, owned.end);
    kind.write(one, begin, std::min(begin + n, owned.end), flat, device);
  }
}

void ShardedStateSync::all_gather_kind(const KindShards& kind, dist::Comm& comm,
                                       const core::Tensor& flat_tensor, const float* owned_values) {
  const core::Device device = flat_tensor.device();
  float* flat = flat_tensor.data<float>();
  const ShardPiece owned = kind.owned();
  if (comm.size() == 1 || kind.total() == 0) {
    if (owned_values != nullptr) kind.write(owned_values, owned.begin, owned.end, flat, device);
    return;
  }
  const Buckets& staging = buckets(device);
  float* many = staging.many.data<float>();
  float* one = staging.one.data<float>();
  const std::int64_t largest = kind.largest_piece();
  const std::int64_t block = block_elements(kind);
  for (std::int64_t at = 0; at < largest; at += block) {
    const std::int64_t n = std::min(block, largest - at);
    const std::int64_t begin = std::min(owned.begin + at, owned.end);
    const std::int64_t end = std::min(begin + n, owned.end);
    if (owned_values != nullptr) {
      copy_floats(staging.one, one, owned_values + (begin - owned.begin), end - begin);
    } else {
      kind.read(flat, begin, end, one, device);
    }
    zero_tail(staging.one, one + (end - begin), one + n);
    comm.all_gather(one, static_cast<std::size_t>(n), many, core::DType::f32);
    for (int shard = 0; shard < kind.shards(); ++shard) {
      const ShardPiece piece = kind.piece(shard);
      const std::int64_t from = std::min(piece.begin + at, piece.end);
      kind.write(many + shard * n, from, std::min(from + n, piece.end), flat, device);
    }
  }
}

void ShardedStateSync::reduce_scatter(const core::Tensor& gradients) {
  require_flat(gradients, "reduce_scatter's gradients");
  if (tensor_parallel_sum_) tensor_parallel_sum_->sum(gradients);
  reduce_scatter_kind(shards_.dense, pool_, gradients);
  reduce_scatter_kind(shards_.expert, expert_data_parallel_, gradients);
}

void ShardedStateSync::set_tensor_parallel(dist::Comm& tensor_parallel,
                                           const ParameterPartition& partition,
                                           core::Device device) {
  tensor_parallel_ = &tensor_parallel;
  tensor_parallel_sum_ =
      std::make_unique<TensorParallelGradientSum>(partition, tensor_parallel, device);
}

double ShardedStateSync::global_sum_of_squares(const core::Tensor& gradients) {
  require_flat(gradients, "global_sum_of_squares' gradients");
  const core::Device device = gradients.device();
  ops::OpContext context;
  context.device = device;
  if (device == core::Device::cuda) {
    if (!device_scratch_)
      device_scratch_ =
          std::make_unique<core::Arena>("sharded_state_sync.scratch", 1 << 20, device);
    context.scratch = device_scratch_.get();
  }
  // One sum per owned range, added in order on the host: the same association on both devices.
  // sums[1]: what the TP ranks hold different pieces of (split tensors, experts).
  double sums[2] = {0.0, 0.0};
  const bool tensor_parallel = tensor_parallel_ != nullptr && tensor_parallel_->size() > 1;
  float* base = gradients.data<float>();
  for (const ParameterRange& range : shards_.owned_ranges) {
    if (range.tied_copy) continue;
    const bool differs_over_tp =
        tensor_parallel && (range.is_expert || range.split != model::TensorSplit::whole);
    sums[differs_over_tp ? 1 : 0] += ops::sum_of_squares(
        context,
        core::Tensor::view_of(base + range.offset, {range.count}, core::DType::f32, device));
  }
  // Dense pieces partition the dense state over the pool; expert pieces partition each EP
  // index's experts over its expert-DP group, and EP indices hold different experts. Under
  // tensor parallelism expert-DP x EP groups span the stage (the pools of every TP rank).
  pool_.all_reduce(sums, sums, 2, core::DType::f64, dist::ReduceOp::sum);
  if (tensor_parallel)
    tensor_parallel_->all_reduce(&sums[1], &sums[1], 1, core::DType::f64, dist::ReduceOp::sum);
  return sums[0] + sums[1];
}

void ShardedStateSync::overlap_parameter_gather(std::unique_ptr<OverlappedParameterGather> gather) {
  complete_parameter_gather();
  parameter_gather_ = std::move(gather);
}

void ShardedStateSync::gather_parameters(const core::Tensor& values) {
  if (!parameter_gather_) return all_gather(values);
  require_flat(values, "gather_parameters' buffer");
  complete_parameter_gather();
  parameter_gather_->start();
}

void ShardedStateSync::complete_parameter_gather() {
  if (parameter_gather_) parameter_gather_->wait_all();
}

void ShardedStateSync::all_gather(const core::Tensor& flat, const core::Tensor& owned_values) {
  require_flat(flat, "all_gather's buffer");
  complete_parameter_gather();
  const float* owned = nullptr;
  if (owned_values.defined()) {
    DYNCP_CHECK(owned_values.dtype() == core::DType::f32 &&
                    owned_values.numel() == shards_.owned_elements &&
                    owned_values.device() == flat.device(),
                "ShardedStateSync::all_gather: owned values are " +
                    std::to_string(shards_.owned_elements) + " f32 elements on " +
                    std::string(core::device_name(flat.device())) + ", got " +
                    owned_values.describe());
    owned = owned_values.data<float>();
  }
  all_gather_kind(shards_.dense, pool_, flat, owned);
  all_gather_kind(shards_.expert, expert_data_parallel_, flat,
                  owned == nullptr ? nullptr : owned + shards_.dense.owned().count());
}

}  // namespace dyncp::parallel
