#include "parallel/optimizer_shards.hpp"

#include <cstring>
#include <string>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace dyncp::parallel {

ShardPiece shard_piece(std::int64_t total, int shards, int index) {
  DYNCP_CHECK(shards >= 1 && index >= 0 && index < shards && total >= 0,
              "shard " + std::to_string(index) + " of " + std::to_string(shards));
  const std::int64_t base = total / shards;
  const std::int64_t longer = total % shards;  // pieces 0..longer-1 hold one more element
  const std::int64_t begin = index * base + std::min<std::int64_t>(index, longer);
  return {begin, begin + base + (index < longer ? 1 : 0)};
}

std::int64_t largest_shard_piece(std::int64_t total, int shards) {
  DYNCP_CHECK(shards >= 1 && total >= 0, "shard count and size");
  return (total + shards - 1) / shards;
}

KindShards::KindShards(std::vector<ParameterRange> ranges, int shards, int index)
    : shards_(shards), index_(index) {
  DYNCP_CHECK(shards >= 1 && index >= 0 && index < shards,
              "shard index " + std::to_string(index) + " of " + std::to_string(shards));
  for (const ParameterRange& range : ranges) {
    if (range.count == 0) continue;
    DYNCP_CHECK(ranges_.empty() || range.offset >= ranges_.back().offset + ranges_.back().count,
                "sharded ranges ascend without overlap");
    ranges_.push_back(range);
    starts_.push_back(starts_.back() + range.count);
  }
}

namespace {

void copy_floats(float* to, const float* from, std::int64_t count, core::Device device) {
  const auto bytes = static_cast<std::size_t>(count) * sizeof(float);
  if (device == core::Device::cpu) {
    std::memcpy(to, from, bytes);
  } else {
    core::device_memory().copy(to, device, from, device, bytes);
  }
}

}  // namespace

void KindShards::read(const float* flat, std::int64_t begin, std::int64_t end, float* out,
                      core::Device device) const {
  for_each_segment(
      begin, end,
      [&](const ParameterRange&, std::int64_t offset, std::int64_t logical, std::int64_t count) {
        copy_floats(out + (logical - begin), flat + offset, count, device);
      });
}

void KindShards::write(const float* in, std::int64_t begin, std::int64_t end, float* flat,
                       core::Device device) const {
  for_each_segment(
      begin, end,
      [&](const ParameterRange&, std::int64_t offset, std::int64_t logical, std::int64_t count) {
        copy_floats(flat + offset, in + (logical - begin), count, device);
      });
}

OptimizerShards plan_optimizer_shards(const ParameterPartition& partition, int dense_shards,
                                      int dense_index, int expert_shards, int expert_index) {
  std::vector<ParameterRange> dense;
  std::vector<ParameterRange> expert;
  for (const ParameterRange& range : partition.ranges)
    (range.is_expert ? expert : dense).push_back(range);
  OptimizerShards shards{KindShards(std::move(dense), dense_shards, dense_index),
                         KindShards(std::move(expert), expert_shards, expert_index),
                         {},
                         0};
  for (const KindShards* kind : {&shards.dense, &shards.expert}) {
    const ShardPiece owned = kind->owned();
    kind->for_each_segment(
        owned.begin, owned.end,
        [&](const ParameterRange& range, std::int64_t offset, std::int64_t, std::int64_t count) {
          shards.owned_ranges.push_back(
              {offset, count, range.is_expert, range.weight_decay, range.tied_copy});
        });
    shards.owned_elements += owned.count();
  }
  return shards;
}

}  // namespace dyncp::parallel
