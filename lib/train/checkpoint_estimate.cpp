#include "train/checkpoint_estimate.hpp"

#include <cstdio>

#include "train/memory_estimate.hpp"

namespace dyncp::train {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

std::string seconds(double value) {
  char text[32];
  std::snprintf(text, sizeof text, value < 10 ? "%.2f s" : "%.0f s", value);
  return text;
}

}  // namespace

CheckpointEstimate estimate_checkpoint(const config::ConfigContainer& config) {
  const config::ModelArchitecture& architecture = config.model.architecture;
  const std::int64_t ep = std::max<std::int64_t>(1, config.model.expert_model_parallel_size);
  const std::int64_t tp = std::max<std::int64_t>(1, config.layout.tensor_model_parallel_size);
  const std::int64_t etp = std::max<std::int64_t>(1, config.layout.expert_tensor_parallel_size);
  CheckpointEstimate estimate;
  estimate.world_size = std::max<std::int64_t>(1, config.layout.world_size);
  estimate.pool = std::max<std::int64_t>(1, estimate.world_size / tp);
  estimate.expert_data_parallel = std::max<std::int64_t>(1, estimate.world_size / (ep * etp));
  // Under TP each TP rank's pool writes its 1/tp of the split dense tensors; TP rank 0's pool
  // also writes the tensors every TP rank holds whole. Each expert-DP group writes its EP
  // rank's experts' 1/etp.
  const std::int64_t local_experts = ceil_div(count_expert_parameters(architecture, ep), etp);
  const std::int64_t dense =
      count_parameters(architecture, ep) - count_expert_parameters(architecture, ep);
  const std::int64_t replicated =
      tp > 1 ? count_tensor_parallel_replicated_parameters(architecture) : 0;
  const std::int64_t dense_of_tp_rank0 = ceil_div(dense - replicated, tp) + replicated;
  const std::int64_t largest = ceil_div(dense_of_tp_rank0, estimate.pool) +
                               ceil_div(local_experts, estimate.expert_data_parallel);
  estimate.largest_rank_bytes = 12.0 * static_cast<double>(largest);
  estimate.total_bytes = 12.0 * static_cast<double>(count_parameters(architecture, 1));
  return estimate;
}

std::string format_checkpoint_estimate(const CheckpointEstimate& estimate, bool sharded) {
  const double single_writer_seconds =
      estimate.total_bytes / assumed_write_bytes_per_second_per_rank;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1fx", single_writer_seconds / estimate.modelled_seconds());
  const std::string rate =
      std::to_string(static_cast<int>(assumed_write_bytes_per_second_per_rank / 1e9)) +
      " GB/s per rank";
  if (!sharded) {
    return "checkpoint save:           rank 0 writes all " + mib(estimate.total_bytes) +
           " (fp32 weights and both Adam moments; checkpoint.sharded=true: " +
           mib(estimate.largest_rank_bytes) + " per rank)\n" +
           "modelled save time:        " + seconds(single_writer_seconds) + " at " + rate +
           " (sharded: " + seconds(estimate.modelled_seconds()) + ", " + ratio + " shorter)\n";
  }
  return "checkpoint save per rank: " + mib(estimate.largest_rank_bytes) + " of " +
         mib(estimate.total_bytes) + " (fp32 weights and both Adam moments; the dense state over " +
         std::to_string(estimate.pool) + " ranks, each EP rank's experts over " +
         std::to_string(estimate.expert_data_parallel) + ")\n" +
         "modelled save time:        " + seconds(estimate.modelled_seconds()) + " at " + rate +
         ", every rank writing in parallel (one writer: " + seconds(single_writer_seconds) + ", " +
         ratio + " longer)\n";
}

}  // namespace dyncp::train
