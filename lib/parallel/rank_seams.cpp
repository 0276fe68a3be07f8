#include "parallel/rank_seams.hpp"

namespace dyncp::parallel {

RankSeams::RankSeams(dist::ParallelState& parallel_state,
                     const config::ModelArchitecture& architecture,
                     const CpExchangeOptions& exchange_options)
    : exchange(make_cp_exchange(exchange_options)),
      experts(parallel_state.expert_parallel(), architecture.num_experts,
              architecture.num_hidden_layers, exchange_options.counters,
              parallel_state.layout().expert_tensor_parallel_size > 1
                  ? &parallel_state.expert_tensor_parallel()
                  : nullptr),
      tensor_parallel(parallel_state.tensor_parallel(), exchange_options.counters),
      statistics(exchange_options.counters) {}

}  // namespace dyncp::parallel
