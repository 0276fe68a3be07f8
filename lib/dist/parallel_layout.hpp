#pragma once
// The parallel layout as pure functions of (tp, dp, cp, ep, etp, rank): which ranks form each
// group. No communication here, so every rule is testable for a 4096-rank pool without MPI;
// ParallelState (parallel_state.hpp) turns these groups into communicators.
//
// World = pipeline_model_parallel_size x stage, stage = tensor_model_parallel_size x pool,
// pool = data_parallel_size x context_parallel_size, in Megatron's order tp-cp-dp-pp: TP
// fastest, the pipeline stage slowest, so every stage holds S = tp x P consecutive ranks:
//   world rank r = stage * S + pool_rank * tp + tp_index,   pool_rank = dp_index * cp + cp_index.
// Every group below lies inside one stage (the ranks given are those of stage 0; stage s adds
// s * S). The pipeline group is the one that crosses stages:
//   pipeline_parallel       ranks l + s * S, s = 0..pp-1 (l = r % S, the same stage position)
// Inside a stage, the dp x cp pool of a TP rank is the P ranks with its tp_index; every CP, DP,
// pool and dynamic CP group lies inside one such pool, and under each pool rank sits one TP
// group of tp consecutive ranks. With tp = 1 (below) stage rank and pool rank coincide.
// Tensor-parallel groups (r a rank of stage 0):
//   tensor_parallel         ranks [r - r % tp, r - r % tp + tp)                stride 1
//   every pool group below  the same pool ranks p, as ranks p * tp + tp_index (stride x tp)
// Expert groups follow Megatron's expert order etp-ep-edp over a stage's S ranks, where etp
// (expert_tensor_parallel_size) is 1 or tp:
//   expert_tensor_parallel  ranks [r - r % etp, r - r % etp + etp)             stride 1
//   expert_parallel         ranks r - r % (etp ep) + r % etp + k * etp, k < ep   stride etp
//   expert_data_parallel    ranks r % (etp ep) + k * etp * ep                  stride etp x ep
// so with etp = 1 an EP group is ep consecutive ranks (it crosses TP groups), and with
// etp = tp it holds the same TP rank of ep consecutive TP groups.
// Worked example, tp = 2, dp = 2, cp = 2, ep = 2, etp = 1 (world 8), rank 5 = tp_index 1,
// pool rank 2 (dp_index 1, cp_index 0): tensor_parallel [4, 5]; context_parallel [5, 7];
// data_parallel [1, 5]; pool [1, 3, 5, 7]; expert_parallel [4, 5]; expert_data_parallel
// [1, 3, 5, 7]; dynamic CP size 2 [5, 7]. With etp = 2: expert_parallel [5, 7],
// expert_data_parallel [1, 5]. With pp = 2 on top (world 16), rank 13 is rank 5 of stage 1:
// every group above plus 8, and pipeline_parallel [5, 13].
// With tp = 1 the groups of a stage are (every group is an arithmetic progression of ranks):
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
  // Tensor parallelism: the fastest dimension of the world; experts split over
  // expert_tensor_parallel_size ranks (1 or tensor_model_parallel_size).
  int tensor_model_parallel_size = 1;
  int expert_tensor_parallel_size = 1;
  // Pipeline parallelism: stages, and virtual chunks per stage (interleaved 1F1B).
  int pipeline_model_parallel_size = 1;
  int virtual_pipeline_model_parallel_size = 1;

  int pool_size() const { return data_parallel_size * context_parallel_size; }
  // The ranks of one pipeline stage: a dp x cp pool per TP rank.
  int stage_size() const { return tensor_model_parallel_size * pool_size(); }
  int world_size() const { return pipeline_model_parallel_size * stage_size(); }
};

struct PipelineSizes {
  int stages = 1;          // model.pipeline_model_parallel_size
  int virtual_chunks = 1;  // model.virtual_pipeline_model_parallel_size (unset: 1)
};

struct TensorSizes {
  int tensor = 1;  // model.tensor_model_parallel_size
  int expert = 1;  // model.expert_tensor_parallel_size (1 or tensor)
};

// Derives data_parallel_size = world_size / (stages x tensor x context_parallel_size) and
// validates the result. Throws a config error listing every problem (key path, value, rule) at
// once.
ParallelLayout layout_for_world(int world_size, int context_parallel_size,
                                int expert_model_parallel_size, bool dynamic_context_parallel,
                                int min_dynamic_context_parallel_size, PipelineSizes pipeline = {},
                                TensorSizes tensor = {});

// Every problem as "key.path: value: rule"; empty when the layout is valid.
std::vector<std::string> layout_problems(const ParallelLayout& layout);
// Throws one config error with every problem.
void validate_layout(const ParallelLayout& layout);

enum class GroupAxis {
  context_parallel,
  data_parallel,
  pool,
  expert_parallel,
  expert_data_parallel,
  tensor_parallel,
  expert_tensor_parallel
};
const char* group_axis_name(GroupAxis axis);
inline constexpr GroupAxis all_group_axes[] = {
    GroupAxis::context_parallel,      GroupAxis::data_parallel,        GroupAxis::pool,
    GroupAxis::expert_parallel,       GroupAxis::expert_data_parallel, GroupAxis::tensor_parallel,
    GroupAxis::expert_tensor_parallel};

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
  int expert_data_parallel_index = 0;  // position inside the expert-DP group
  int tensor_parallel_index = 0;       // position inside the TP group
  int pool_rank = 0;                   // dp_index * cp + cp_index: the rank schedules name
  int expert_tensor_parallel_index = 0;
  int pipeline_parallel_index = 0;  // the stage
};

// All of these take world ranks and throw a runtime error for a rank outside the world or an
// invalid size. num_groups counts the groups of one stage.
RankCoordinates coordinates_of(const ParallelLayout& layout, int rank);
RankGroup group_of(const ParallelLayout& layout, GroupAxis axis, int rank);
int num_groups(const ParallelLayout& layout, GroupAxis axis);
// The ranks at rank's pool position in every stage, stage order (activations flow along it).
RankGroup pipeline_group_of(const ParallelLayout& layout, int rank);

// Powers of two from min_dynamic_context_parallel_size to the pool size, ascending; empty
// without dynamic CP.
std::vector<int> dynamic_cp_group_sizes(const ParallelLayout& layout);
bool is_dynamic_cp_group_size(const ParallelLayout& layout, int size);
// The aligned block of `size` pool ranks holding `rank`'s pool rank p:
// [p - p % size, ... + size), as the world ranks with `rank`'s TP index.
RankGroup dynamic_cp_group_of(const ParallelLayout& layout, int size, int rank);

// A human-readable description for --dry-run: the factors, every axis's groups (at most
// max_groups_listed per axis, then a count) and the dynamic CP sizes.
std::string format_layout(const ParallelLayout& layout, int max_groups_listed = 8);

}  // namespace dyncp::dist
