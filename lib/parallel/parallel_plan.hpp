#pragma once
// The run's parallel plan: one value, built once from the resolved config and the world, that
// everything after start-up asks about layout. It holds the size of every dimension (pp, dp, cp,
// the dp x cp pool of each stage and TP rank, ep and expert-dp, tp and expert-tp), Megatron's
// rank order (tp fastest, pp slowest), the split of the layers over the pipeline stages, this
// rank's
// coordinates and experts, the dynamic CP group sizes, the scheduler that runs, the capacity per
// pool rank and the alignment rule. Pure: no communication, so `--dry-run` builds the very plan
// of rank 0 that a real run logs at start-up. A new parallel dimension is a new field here (and
// its rank order in dist::ParallelLayout), not a parameter threaded through the trainer.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config_container.hpp"
#include "config/pipeline_split.hpp"
#include "dist/parallel_layout.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "packing/alignment.hpp"

namespace dyncp::parallel {

struct ParallelPlan {
  int world_size = 1;
  int rank = 0;  // the world rank this plan describes
  dist::ParallelLayout layout;
  dist::RankCoordinates coordinates;
  // The recipe's model.sequence_packing_scheduler, else the layout's default (dynamic CP:
  // default_dynamic_cp; static: dp_balanced).
  config::PackingScheduler scheduler = config::PackingScheduler::dp_balanced;
  std::int64_t max_seqlen_per_dp_cp_rank = 0;  // capacity of one pool rank, in padded tokens
  packing::AlignmentRule alignment;
  model::ExpertRange experts;  // this rank's experts: [first, first + count) of num_experts
  // Pipeline parallelism: every stage's layer chunks; this rank runs the chunks of stage
  // coordinates.pipeline_parallel_index.
  config::PipelineSplit pipeline;

  // The largest CP group a step can form: the pool under dynamic CP, else cp.
  int largest_cp_group() const;
  // Tokens that group holds (largest_cp_group() x max_seqlen_per_dp_cp_rank): no sample is
  // longer and can still be scheduled.
  std::int64_t largest_group_tokens() const;
  // The alignment multiple of a sequence on that group.
  std::int64_t largest_group_multiple() const;
  // This rank's group on a static axis.
  dist::RankGroup group(dist::GroupAxis axis) const { return dist::group_of(layout, axis, rank); }
};

// Builds the plan of world rank `rank` in a world of `world_size` ranks. Config errors (exit 2,
// naming the key) for a layout the world cannot take.
ParallelPlan make_parallel_plan(const config::ConfigContainer& config, int world_size, int rank);

// The experts a rank at `expert_parallel_index` of an EP group of `expert_parallel_size` holds;
// config error naming model.expert_model_parallel_size when it does not divide num_experts.
model::ExpertRange expert_range_of(std::int64_t num_experts, int expert_parallel_size,
                                   int expert_parallel_index);

// One line for the start-up log: "world 8 = dp 4 x cp 2, ep 2, dynamic CP, alignment ...";
// under TP "world 16 = tp 2 (sequence parallel) x dp 4 x cp 2, ep 2 (etp 1), ...".
std::string summarize_parallel_plan(const ParallelPlan& plan);
// This rank's coordinates, static groups, dynamic CP groups and experts, one per line (the dry
// run prints rank 0's).
std::string describe_rank_groups(const ParallelPlan& plan, std::int64_t num_experts);

}  // namespace dyncp::parallel
