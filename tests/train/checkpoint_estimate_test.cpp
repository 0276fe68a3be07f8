// The dry run's bytes per rank for a sharded checkpoint against the pieces the writer really
// plans (train/sharded_checkpoint.hpp) on every rank of the layout, without MPI.

#include "train/checkpoint_estimate.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "dist/parallel_layout.hpp"
#include "parallel/optimizer_shards.hpp"
#include "parallel/parameter_partition.hpp"
#include "train/sharded_checkpoint.hpp"

using namespace dyncp;

TEST_CASE("the estimated bytes per rank are the largest rank's planned shard",
          "[train][checkpoint]") {
  const std::int64_t world = GENERATE(1, 2, 4, 8);
  const std::int64_t ep = GENERATE(1, 2, 4);
  if (world % ep != 0) return;
  INFO("world " << world << ", ep " << ep);
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml",
      {"model.expert_model_parallel_size=" + std::to_string(ep), "model.context_parallel_size=1",
       "model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced",
       "model.max_seqlen_per_dp_cp_rank=256"});
  config::resolve_config(config, world);
  const train::CheckpointEstimate estimate = train::estimate_checkpoint(config);

  auto architecture = config.model.architecture;
  architecture.resolve();
  const std::int64_t per_ep_rank = architecture.num_experts / ep;
  const int expert_dp = static_cast<int>(world / ep);
  std::int64_t largest = 0;
  std::int64_t total = 0;
  for (std::int64_t j = 0; j < ep; ++j) {
    const model::Qwen3MoeParameters parameters(architecture,
                                               model::ExpertRange{j * per_ep_rank, per_ep_rank});
    const auto partition = parallel::partition_parameters(parameters);
    for (int i = 0; i < expert_dp; ++i) {
      // The pool index of EP rank j, expert-DP index i (any order gives the same pieces' sizes).
      const int pool_index = static_cast<int>(i * ep + j);
      const auto shards = parallel::plan_optimizer_shards(partition, static_cast<int>(world),
                                                          pool_index, expert_dp, i);
      const std::int64_t elements = train::plan_rank_shard(parameters, shards).elements;
      largest = std::max(largest, elements);
      total += elements;
    }
  }
  const model::Qwen3MoeParameters whole(architecture);
  std::int64_t elements = 0;  // the tensors' own, without the 16-value alignment between them
  for (const model::HfTensor& tensor : whole.hf_tensors()) elements += tensor.value.numel();
  CHECK(total == elements);  // every element written once
  // The estimate counts the model's 16-value alignment too: an upper bound, within 2%.
  CHECK(estimate.largest_rank_bytes >= 12.0 * static_cast<double>(largest));
  CHECK(estimate.largest_rank_bytes <= 1.02 * 12.0 * static_cast<double>(largest));
  CHECK(estimate.total_bytes >= 12.0 * static_cast<double>(elements));
  CHECK(estimate.modelled_seconds() ==
        Approx(estimate.largest_rank_bytes / train::assumed_write_bytes_per_second_per_rank));
  const std::string text = train::format_checkpoint_estimate(estimate, true);
  CHECK_THAT(text, Catch::Contains("checkpoint save per rank: ") &&
                       Catch::Contains("modelled save time:") &&
                       Catch::Contains("over " + std::to_string(world) + " ranks"));
  CHECK_THAT(train::format_checkpoint_estimate(estimate, false),
             Catch::Contains("rank 0 writes all") && Catch::Contains("sharded: "));
}

TEST_CASE("under tensor parallelism the estimate is the largest TP rank's planned shard",
          "[train][checkpoint]") {
  const std::int64_t world = GENERATE(2, 4, 8);
  const std::int64_t tp = 2;
  const std::int64_t etp = GENERATE(1, 2);
  const std::int64_t ep = GENERATE(1, 2, 4);
  if (world % (ep * etp) != 0) return;
  INFO("world " << world << ", tp " << tp << ", etp " << etp << ", ep " << ep);
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml",
      {"model.expert_model_parallel_size=" + std::to_string(ep), "model.context_parallel_size=1",
       "model.dynamic_context_parallel=false", "model.sequence_packing_scheduler=dp_balanced",
       "model.max_seqlen_per_dp_cp_rank=256",
       "model.tensor_model_parallel_size=" + std::to_string(tp),
       "model.expert_tensor_parallel_size=" + std::to_string(etp)});
  config::resolve_config(config, world);
  const train::CheckpointEstimate estimate = train::estimate_checkpoint(config);
  CHECK(estimate.pool == world / tp);

  auto architecture = config.model.architecture;
  architecture.resolve();
  dist::ParallelLayout layout;
  layout.data_parallel_size = static_cast<int>(world / tp);
  layout.expert_model_parallel_size = static_cast<int>(ep);
  layout.tensor_model_parallel_size = static_cast<int>(tp);
  layout.expert_tensor_parallel_size = static_cast<int>(etp);
  const std::int64_t per_ep_rank = architecture.num_experts / ep;
  std::int64_t largest = 0, total = 0;
  for (int rank = 0; rank < world; ++rank) {
    const dist::RankCoordinates at = dist::coordinates_of(layout, rank);
    const model::Qwen3MoeParameters parameters(
        architecture, model::ExpertRange{at.expert_parallel_index * per_ep_rank, per_ep_rank},
        core::DType::f32, core::Device::cpu,
        model::TensorParallelShape{static_cast<int>(tp), at.tensor_parallel_index,
                                   static_cast<int>(etp), at.expert_tensor_parallel_index});
    const auto shards = parallel::plan_optimizer_shards(
        parallel::partition_parameters(parameters), layout.pool_size(), at.pool_rank,
        static_cast<int>(world / (ep * etp)), at.expert_data_parallel_index);
    const std::int64_t elements = train::plan_rank_shard(parameters, shards).elements;
    largest = std::max(largest, elements);
    total += elements;
  }
  const model::Qwen3MoeParameters whole(architecture);
  std::int64_t elements = 0;
  for (const model::HfTensor& tensor : whole.hf_tensors()) elements += tensor.value.numel();
  CHECK(total == elements);  // every element written once, whatever the TP ranks hold
  CHECK(estimate.largest_rank_bytes >= 12.0 * static_cast<double>(largest));
  CHECK(estimate.largest_rank_bytes <= 1.03 * 12.0 * static_cast<double>(largest));
  CHECK(estimate.expert_data_parallel == world / (ep * etp));
}
