#include "parallel/sharded_state_sync.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

namespace {

void require_group(const KindShards& kind, const dist::Comm& comm, const char* what) {
  DYNCP_CHECK(kind.shards() == comm.size() && kind.index() == comm.rank(),
              std::string(what) + " state is planned for shard " + std::to_string(kind.index()) +
                  " of " + std::to_string(kind.shards()) + " but communicator '" + comm.name() +
                  "' has rank " + std::to_string(comm.rank()) + " of " +
                  std::to_string(comm.size()));
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
  std::int64_t many = 0;
  std::int64_t one = 0;
  for (const KindShards* kind : {&shards_.dense, &shards_.expert}) {
    const std::int64_t block = block_elements(*kind);
    many = std::max(many, block * kind->shards());
    one = std::max(one, block);
  }
  many_.resize(static_cast<std::size_t>(many));
  one_.resize(static_cast<std::size_t>(one));
}

std::int64_t ShardedStateSync::block_elements(const KindShards& kind) const {
  return std::clamp<std::int64_t>(bucket_elements_ / kind.shards(), 1,
                                  std::max<std::int64_t>(kind.largest_piece(), 1));
}

void ShardedStateSync::reduce_scatter_kind(const KindShards& kind, dist::Comm& comm, float* flat) {
  if (comm.size() == 1 || kind.total() == 0) return;
  const std::int64_t largest = kind.largest_piece();
  const std::int64_t block = block_elements(kind);
  for (std::int64_t at = 0; at < largest; at += block) {
    const std::int64_t n = std::min(block, largest - at);
    for (int shard = 0; shard < kind.shards(); ++shard) {
      const ShardPiece piece = kind.piece(shard);
      const std::int64_t begin = std::min(piece.begin + at, piece.end);
      const std::int64_t end = std::min(begin + n, piece.end);
      float* slot = many_.data() + shard * n;
      kind.read(flat, begin, end, slot);
      std::fill(slot + (end - begin), slot + n, 0.0f);
    }
    comm.reduce_scatter(many_.data(), one_.data(), static_cast<std::size_t>(n), core::DType::f32,
                        dist::ReduceOp::sum);
    // Round k writes only sub-block k of the own piece, which no later round reads.
    const ShardPiece owned = kind.owned();
    const std::int64_t begin = std::min(owned.begin + at, owned.end);
    kind.write(one_.data(), begin, std::min(begin + n, owned.end), flat);
  }
}

void ShardedStateSync::all_gather_kind(const KindShards& kind, dist::Comm& comm, float* flat,
                                       const float* owned_values) {
  const ShardPiece owned = kind.owned();
  if (comm.size() == 1 || kind.total() == 0) {
    if (owned_values != nullptr) kind.write(owned_values, owned.begin, owned.end, flat);
    return;
  }
  const std::int64_t largest = kind.largest_piece();
  const std::int64_t block = block_elements(kind);
  for (std::int64_t at = 0; at < largest; at += block) {
    const std::int64_t n = std::min(block, largest - at);
    const std::int64_t begin = std::min(owned.begin + at, owned.end);
    const std::int64_t end = std::min(begin + n, owned.end);
    if (owned_values != nullptr) {
      std::copy(owned_values + (begin - owned.begin), owned_values + (end - owned.begin),
                one_.data());
    } else {
      kind.read(flat, begin, end, one_.data());
    }
    std::fill(one_.data() + (end - begin), one_.data() + n, 0.0f);
    comm.all_gather(one_.data(), static_cast<std::size_t>(n), many_.data(), core::DType::f32);
    for (int shard = 0; shard < kind.shards(); ++shard) {
      const ShardPiece piece = kind.piece(shard);
      const std::int64_t from = std::min(piece.begin + at, piece.end);
      kind.write(many_.data() + shard * n, from, std::min(from + n, piece.end), flat);
    }
  }
}

void ShardedStateSync::reduce_scatter(float* gradients) {
  reduce_scatter_kind(shards_.dense, pool_, gradients);
  reduce_scatter_kind(shards_.expert, expert_data_parallel_, gradients);
}

double ShardedStateSync::global_sum_of_squares(const float* gradients) {
  double sum = 0.0;
  for (const ParameterRange& range : shards_.owned_ranges) {
    const float* g = gradients + range.offset;
    for (std::int64_t i = 0; i < range.count; ++i) sum += static_cast<double>(g[i]) * g[i];
  }
  // Dense pieces partition the dense state over the pool; expert pieces partition each EP
  // index's experts over its expert-DP group, and EP indices hold different experts.
  pool_.all_reduce(&sum, &sum, 1, core::DType::f64, dist::ReduceOp::sum);
  return sum;
}

void ShardedStateSync::all_gather(float* flat, const float* owned_values) {
  all_gather_kind(shards_.dense, pool_, flat, owned_values);
  all_gather_kind(shards_.expert, expert_data_parallel_, flat,
                  owned_values == nullptr ? nullptr : owned_values + shards_.dense.owned().count());
}

}  // namespace dyncp::parallel
