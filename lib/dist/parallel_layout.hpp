#pragma once
// The parallel layout as pure functions of (dp, cp, ep, rank): which ranks form each group.
// No communication here, so every rule is testable for a 4096-rank pool without MPI;
// ParallelState (parallel_state.hpp) turns these groups into communicators.
//
// World = pipeline_model_parallel_size x pool, pool = data_parallel_size x
// context_parallel_size ranks (TP = 1), in Megatron's order: CP fastest, the pipeline stage
// slowest, so every stage has its own dp x cp pool of consecutive ranks:
//   world rank = stage * P + r,   pool rank r = dp_index * cp + cp_index.
// Every group below lies inside one stage's pool (the ranks given are those of stage 0; stage s
// adds s * P). The pipeline group is the one that crosses stages:
//   pipeline_parallel     ranks r + s * P, s = 0..pp-1 (the same pool position)  stride P
// Groups (every group is an arithmetic progression of ranks: first, first + stride, ...):
//   context_parallel      ranks [dp_index * cp, dp_index * cp + cp)           stride 1
//   data_parallel         ranks cp_index + k * cp, k = 0..dp-1                stride cp
//   pool                  ranks 0..P-1
//   expert_parallel       ranks [r - r % ep, r - r % ep + ep)                 stride 1
//   expert_data_parallel  ranks r % ep + k * ep, k = 0..P/ep-1 (same EP index) stride ep
//   dynamic CP, size c    ranks [r - r % c, r - r % c + c): the aligned block holding r;
//                         c is a power of two in [min_dynamic_context_parallel_size, P].
// Worked example, dp = 4, cp = 2, ep = 4 (P = 8), rank 5 = dp_index 2, cp_index 1:
//   context_parallel [4, 5]; data_parallel [1, 3, 5, 7]; expert_parallel [4, 5, 6, 7];
//   expert_data_parallel [1, 5]; dynamic CP size 1 [5], 2 [4, 5], 4 [4..7], 8 = pool.
// A dynamic group of size c <= cp lies inside one DP replica's CP group (size cp is exactly
// that group); a group of size c > cp spans c / cp whole consecutive replicas.

#include <string>
#include <vector>

namespace dyncp::dist {

struct ParallelLayout {
  int data_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  bool dynamic_context_parallel = false;
  int min_dynamic_context_parallel_size = 1;
  // Pipeline parallelism: stages, and virtual chunks per stage (interleaved 1F1B).
  int pipeline_model_parallel_size = 1;
  int virtual_pipeline_model_parallel_size = 1;

  int pool_size() const { return data_parallel_size * context_parallel_size; }
  int world_size() const { return pipeline_model_parallel_size * pool_size(); }
};

struct PipelineSizes {
  int stages = 1;          // model.pipeline_model_parallel_size
  int virtual_chunks = 1;  // model.virtual_pipeline_model_parallel_size (unset: 1)
};

// Derives data_parallel_size = world_size / (stages x context_parallel_size) and validates the
// result. Throws a config error listing every problem (key path, value, rule) at once.
ParallelLayout layout_for_world(int world_size, int context_parallel_size,
                                int expert_model_parallel_size, bool dynamic_context_parallel,
                                int min_dynamic_context_parallel_size, PipelineSizes pipeline = {});

// Every problem as "key.path: value: rule"; empty when the layout is valid.
std::vector<std::string> layout_problems(const ParallelLayout& layout);
// Throws one config error with every problem.
void validate_layout(const ParallelLayout& layout);

enum class GroupAxis {
  context_parallel,
  data_parallel,
  pool,
  expert_parallel,
  expert_data_parallel
};
const char* group_axis_name(GroupAxis axis);
inline constexpr GroupAxis all_group_axes[] = {
    GroupAxis::context_parallel, GroupAxis::data_parallel, GroupAxis::pool,
    GroupAxis::expert_parallel, GroupAxis::expert_data_parallel};

// ranks first_rank + i * stride for i in [0, size). `index` numbers the groups of one axis
// (or of one dynamic size) 0, 1, ...; it is the color used to split the communicator.
struct RankGroup {
  int first_rank = 0;
  int stride = 1;
  int size = 1;
  int index = 0;

  int rank_at(int position) const { return first_rank + position * stride; }
  bool contains(int rank) const;
  // Position of `rank` inside the group (its rank in the group's communicator); -1 if absent.
  int position_of(int rank) const;
  std::vector<int> ranks() const;
  // "[4, 5, 6, 7]"; long groups are shortened to "[0, 2, 4, ..., 4094] (2048 ranks)".
  std::string to_string() const;

  friend bool operator==(const RankGroup&, const RankGroup&) = default;
};

struct RankCoordinates {
  int data_parallel_index = 0;
  int context_parallel_index = 0;
  int expert_parallel_index = 0;       // position inside the EP group
  int expert_data_parallel_index = 0;  // which EP group (position inside the expert-DP group)
  int pipeline_parallel_index = 0;     // the stage
  int pool_rank = 0;                   // position inside the stage's pool
};

// All of these throw a runtime error for a rank outside the world or an invalid size.
// num_groups counts the groups of one stage.
RankCoordinates coordinates_of(const ParallelLayout& layout, int rank);
RankGroup group_of(const ParallelLayout& layout, GroupAxis axis, int rank);
int num_groups(const ParallelLayout& layout, GroupAxis axis);
// The ranks at rank's pool position in every stage, stage order (activations flow along it).
RankGroup pipeline_group_of(const ParallelLayout& layout, int rank);

// Powers of two from min_dynamic_context_parallel_size to the pool size, ascending; empty
// without dynamic CP.
std::vector<int> dynamic_cp_group_sizes(const ParallelLayout& layout);
bool is_dynamic_cp_group_size(const ParallelLayout& layout, int size);
// The aligned block of `size` ranks holding `rank`: [rank - rank % size, ... + size).
RankGroup dynamic_cp_group_of(const ParallelLayout& layout, int size, int rank);

// A human-readable description for --dry-run: the factors, every axis's groups (at most
// max_groups_listed per axis, then a count) and the dynamic CP sizes.
std::string format_layout(const ParallelLayout& layout, int max_groups_listed = 8);

}  // namespace dyncp::dist
