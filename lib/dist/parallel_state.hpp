#pragma once
// The communicators of one parallel layout (parallel_layout.hpp says which ranks form each
// group). Passed explicitly to whoever needs it; never a global.
//
// Static groups (context_parallel, data_parallel, pool, expert_parallel,
// expert_data_parallel, tensor_parallel, expert_tensor_parallel, and across the stages the
// pipeline and embedding groups) are split from the world communicator in the constructor, which is
// therefore collective over the world. Under TP every pool group (and every dynamic CP group) is
// one per TP rank: the pool communicator a dynamic group is split from holds the ranks of this
// rank's TP index only.
//
// Dynamic CP groups: a microbatch runs on the aligned block of c ranks the scheduler chose
// (c a power of two in [min_dynamic_context_parallel_size, pool]). Every rank holds the same
// schedule, so before a step's first microbatch every rank calls
// ensure_dynamic_groups(sizes that step uses): the sizes not created yet are created, in
// ascending order whatever order they are passed in, each by one split of the pool
// communicator (collective: every rank makes the same calls). Created groups are kept for
// the rest of the run and logged with their creation time; a size equal to cp or to the pool
// reuses the static group with the same ranks. dynamic_group(c) then only looks up.

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "dist/parallel_layout.hpp"

namespace dyncp::dist {

struct ParallelStateOptions {
  // ensure_dynamic_groups first checks, with one 16-byte all-reduce over the pool, that every
  // rank asked for the same set of sizes; a mismatch is an error naming the sets instead of
  // mismatched splits. Costs one small collective per call.
  bool verify_group_requests = true;
};

class ParallelState {
 public:
  // Collective over `world`, whose size must equal layout.world_size() (pp x tp x dp x cp).
  // `world` must outlive this object.
  ParallelState(Comm& world, const ParallelLayout& layout,
                const ParallelStateOptions& options = {});
  ~ParallelState();
  ParallelState(const ParallelState&) = delete;
  ParallelState& operator=(const ParallelState&) = delete;

  const ParallelLayout& layout() const { return layout_; }
  int rank() const { return world_.rank(); }
  const RankCoordinates& coordinates() const { return coordinates_; }

  Comm& world() { return world_; }
  Comm& group(GroupAxis axis);
  Comm& context_parallel() { return group(GroupAxis::context_parallel); }
  Comm& data_parallel() { return group(GroupAxis::data_parallel); }
  Comm& pool() { return group(GroupAxis::pool); }
  Comm& expert_parallel() { return group(GroupAxis::expert_parallel); }
  Comm& expert_data_parallel() { return group(GroupAxis::expert_data_parallel); }
  Comm& tensor_parallel() { return group(GroupAxis::tensor_parallel); }
  Comm& expert_tensor_parallel() { return group(GroupAxis::expert_tensor_parallel); }
  // The ranks at this rank's stage position in every stage, in stage order
  // (pipeline_group_of): a rank's position in it is its stage. One rank without pipeline
  // parallelism.
  Comm& pipeline() { return *pipeline_; }
  // The first and the last stage's ranks at this stage position when pp > 1 (Megatron's
  // embedding group: a tied LM head's copy on the last stage sums its gradient with the
  // embedding's over it); nullptr on the middle stages and without pipeline parallelism.
  Comm* embedding_group() { return embedding_group_.get(); }

  // Collective over the pool; see the header comment. Throws a runtime error for a size that
  // is not a dynamic CP size of this layout (or when dynamic CP is off).
  void ensure_dynamic_groups(std::span<const int> sizes);
  // Every dynamic size of the layout (eager creation, e.g. for a warm-up).
  void ensure_all_dynamic_groups();
  bool has_dynamic_group(int size) const;
  // This rank's group of `size`; throws if ensure_dynamic_groups has not created it.
  Comm& dynamic_group(int size);
  // The group a schedule names for this rank: pool ranks [first_rank, first_rank + size). Throws
  // when this rank is not in it or it is not an aligned block (a scheduling bug), else as
  // dynamic_group(size).
  Comm& dynamic_group_at(int first_rank, int size);
  // Splits done for dynamic groups so far (reused static groups do not count).
  int dynamic_group_creations() const { return static_cast<int>(created_dynamic_sizes_.size()); }
  // The sizes created by splits, in creation order.
  const std::vector<int>& created_dynamic_sizes() const { return created_dynamic_sizes_; }

  // Sum of the counters of every communicator held here (world, static, dynamic), each
  // counted once: what this rank sent and received through this layout.
  CommCounters total_counters() const;
  // One line per communicator: name, size, calls, bytes sent / received.
  std::string format_counters() const;

 private:
  static constexpr std::size_t max_log2_pool = 31;

  Comm& world_;
  ParallelLayout layout_;
  ParallelStateOptions options_;
  RankCoordinates coordinates_;
  std::array<std::unique_ptr<Comm>, std::size(all_group_axes)> static_groups_;
  std::unique_ptr<Comm> pipeline_;
  std::unique_ptr<Comm> embedding_group_;
  // Indexed by log2(size): owned when created by a split, else pointing at a static group.
  std::array<std::unique_ptr<Comm>, max_log2_pool + 1> owned_dynamic_;
  std::array<Comm*, max_log2_pool + 1> dynamic_{};
  std::vector<int> created_dynamic_sizes_;
};

}  // namespace dyncp::dist
