#include "parallel/group_statistics.hpp"

namespace dyncp::parallel {

void GroupStatisticsReducer::reduce(const model::SeamContext&, const core::Tensor& counts,
                                    const core::Tensor& prob_sums) {
  if (group_ == nullptr || group_->size() == 1) return;
  ScopedMilliseconds timer(counters_ != nullptr ? counters_->cp_comm_ms : unreported_ms_);
  for (const core::Tensor* statistics : {&counts, &prob_sums}) {
    group_->all_reduce(statistics->raw_data(), statistics->raw_data(),
                       static_cast<std::size_t>(statistics->numel()), statistics->dtype(),
                       dist::ReduceOp::sum);
  }
}

}  // namespace dyncp::parallel
