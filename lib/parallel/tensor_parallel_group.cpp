#include "parallel/tensor_parallel_group.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::parallel {

namespace {

std::int64_t row_elements(const core::Tensor& t) {
  return t.size(0) == 0 ? 0 : t.numel() / t.size(0);
}

}  // namespace

void TensorParallelGroup::all_reduce(const model::SeamContext&, const core::Tensor& x) {
  if (group_.size() == 1 || x.numel() == 0) return;
  ScopedMilliseconds timer(time());
  group_.all_reduce(x.raw_data(), x.raw_data(), static_cast<std::size_t>(x.numel()), x.dtype(),
                    dist::ReduceOp::sum);
}

void TensorParallelGroup::all_gather_rows(const model::SeamContext&, const core::Tensor& shard,
                                          std::span<const std::int64_t> row_counts,
                                          const core::Tensor& full) {
  DYNCP_CHECK(static_cast<int>(row_counts.size()) == group_.size(), "a row count per TP rank");
  DYNCP_CHECK(row_counts[static_cast<std::size_t>(group_.rank())] == shard.size(0),
              "this rank's row count is its shard's");
  const std::int64_t width = row_elements(full);
  counts_.resize(row_counts.size());
  std::int64_t total = 0;
  bool equal = true;
  for (std::size_t r = 0; r < row_counts.size(); ++r) {
    counts_[r] = static_cast<std::size_t>(row_counts[r] * width);
    total += row_counts[r];
    equal = equal && row_counts[r] == row_counts[0];
  }
  DYNCP_CHECK(total == full.size(0), "the gathered rows fill the whole tensor");
  if (group_.size() == 1) {
    if (full.raw_data() != shard.raw_data()) full.copy_from(shard);
    return;
  }
  ScopedMilliseconds timer(time());
  if (equal) {
    group_.all_gather(shard.raw_data(), counts_[0], full.raw_data(), full.dtype());
  } else {
    group_.all_gather_v(shard.raw_data(), counts_[static_cast<std::size_t>(group_.rank())],
                        full.raw_data(), counts_, full.dtype());
  }
}

void TensorParallelGroup::reduce_scatter_rows(const model::SeamContext&, const core::Tensor& full,
                                              const core::Tensor& shard) {
  DYNCP_CHECK(full.size(0) == shard.size(0) * group_.size(),
              "a reduce-scatter of " + std::to_string(full.size(0)) + " rows over " +
                  std::to_string(group_.size()) + " TP ranks leaves " +
                  std::to_string(shard.size(0)) + " each");
  if (group_.size() == 1) {
    if (full.raw_data() != shard.raw_data()) shard.copy_from(full);
    return;
  }
  ScopedMilliseconds timer(time());
  group_.reduce_scatter(full.raw_data(), shard.raw_data(), static_cast<std::size_t>(shard.numel()),
                        full.dtype(), dist::ReduceOp::sum);
}

}  // namespace dyncp::parallel
