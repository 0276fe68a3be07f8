#include "parallel/whole_model_gathers.hpp"

namespace dyncp::parallel {

void GroupPieceSum::sum(std::span<float> values) {
  if (group_.size() == 1) return;
  group_.all_reduce(values.data(), values.data(), values.size(), core::DType::f32,
                    dist::ReduceOp::sum);
}

WriterGathers::WriterGathers(dist::ParallelState& parallel_state)
    : tensor_parallel_(parallel_state.tensor_parallel()),
      expert_tensor_parallel_(parallel_state.expert_tensor_parallel()),
      expert_parallel_(parallel_state.expert_parallel()) {
  const dist::ParallelLayout& layout = parallel_state.layout();
  const int rank = parallel_state.world().rank();
  // World rank 0 writes; under pipeline parallelism the first rank of every other stage relays
  // its stage's tensors to it, so each stage's first rank is the one its groups help.
  const int writer = rank - rank % layout.stage_size();
  const auto holds_writer = [&](dist::GroupAxis axis, int member) {
    return dist::group_of(layout, axis, member).contains(writer);
  };
  const bool tensor_group = holds_writer(dist::GroupAxis::tensor_parallel, rank);
  const bool expert_group = holds_writer(dist::GroupAxis::expert_parallel, rank);
  // The expert-TP group of a rank of the writer's EP group: its first rank is one.
  const int expert_tp_first =
      dist::group_of(layout, dist::GroupAxis::expert_tensor_parallel, rank).first_rank;
  const bool expert_tp_group = holds_writer(dist::GroupAxis::expert_parallel, expert_tp_first);
  gathers_.dense = tensor_group;
  gathers_.experts = expert_tp_group;
  gathers_.tensor_parallel =
      tensor_group && layout.tensor_model_parallel_size > 1 ? &tensor_parallel_ : nullptr;
  gathers_.expert_tensor_parallel = expert_tp_group && layout.expert_tensor_parallel_size > 1
                                        ? &expert_tensor_parallel_
                                        : nullptr;
  gathers_.expert_parallel = expert_group ? &expert_parallel_ : nullptr;
}

}  // namespace dyncp::parallel
