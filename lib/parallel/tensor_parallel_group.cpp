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
                                          const core::Tensor& full) {
  const std::int64_t width = row_elements(full), rows = full.size(0);
  counts_.resize(static_cast<std::size_t>(group_.size()));
  bool equal = true;
  for (int r = 0; r < group_.size(); ++r) {
    const auto [begin, end] = model::tensor_parallel_row_range(rows, group_.size(), r);
    counts_[static_cast<std::size_t>(r)] = static_cast<std::size_t>((end - begin) * width);
    equal = equal && counts_[static_cast<std::size_t>(r)] == counts_[0];
  }
  DYNCP_CHECK(
      static_cast<std::size_t>(shard.numel()) == counts_[static_cast<std::size_t>(group_.rank())],
      "this rank's shard holds its rows of the gathered tensor");
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
