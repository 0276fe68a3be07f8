// The layout equivalence tool's comparisons by HF tensor name and its checks that the layout
// divides memory, runs the exchange asked for and divides the distributed optimizer's state.

#include "layout_equivalence_support.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "core/device_memory.hpp"

namespace dyncp::equivalence {

// The tensor's elements on the host, wherever it lives.
std::vector<float> host_floats(const core::Tensor& tensor) {
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  if (tensor.device() == core::Device::cpu) {
    std::memcpy(values.data(), tensor.raw_data(), values.size() * sizeof(float));
  } else {
    core::device_memory().copy(values.data(), core::Device::cpu, tensor.raw_data(), tensor.device(),
                               values.size() * sizeof(float));
  }
  return values;
}

template <typename T>
std::vector<T> laid_out_like(const model::Qwen3MoeParameters& ours,
                             const model::Qwen3MoeParameters& reference,
                             const core::Tensor& reference_flat) {
  std::vector<T> out(static_cast<std::size_t>(ours.num_parameters()), T{0});
  const float* our_base = ours.all_values().data<float>();
  const T* reference_base = reference.all_values().data<T>();
  std::vector<float> whole;
  for (const auto& tensor : ours.hf_tensors()) {
    const model::HfTensor* match = reference.find(tensor.name);
    if (match == nullptr) throw std::runtime_error("reference has no " + tensor.name);
    const std::int64_t at = tensor.value.data<float>() - our_base;
    const std::int64_t from = match->value.data<T>() - reference_base;
    const auto view = [](const T* data, const core::Tensor& like) {
      return core::Tensor::view_of(const_cast<T*>(data), like.shape(), core::dtype_of<T>::value);
    };
    whole.assign(static_cast<std::size_t>(match->hf_numel()), 0.0f);
    match->read_hf_order(view(reference_flat.data<T>() + from, match->value), whole.data());
    if constexpr (std::is_same_v<T, float>) {
      tensor.write_hf_order(whole.data(), view(out.data() + at, tensor.value));
    } else {
      // fp64 truth: re-read the whole tensor's doubles so no precision is lost.
      std::vector<double> whole_double(whole.size());
      std::vector<float> scratch(whole.size());
      const core::Tensor source = view(reference_flat.data<T>() + from, match->value);
      const std::int64_t columns = source.numel() / std::max<std::int64_t>(source.size(0), 1);
      const std::int64_t hf_columns = match->hf_numel() / match->hf_shape.at(0);
      match->for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
        for (std::int64_t r = 0; r < count; ++r)
          for (std::int64_t c = 0; c < columns; ++c)
            whole_double[static_cast<std::size_t>((hf_row + r) * hf_columns +
                                                  match->hf_column_first + c)] =
                source.data<double>()[(row + r) * columns + c];
      });
      const std::int64_t our_columns = tensor.value.numel() / tensor.value.size(0);
      const std::int64_t our_hf_columns = tensor.hf_numel() / tensor.hf_shape.at(0);
      tensor.for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
        for (std::int64_t r = 0; r < count; ++r)
          for (std::int64_t c = 0; c < our_columns; ++c)
            out[static_cast<std::size_t>(at + (row + r) * our_columns + c)] =
                whole_double[static_cast<std::size_t>((hf_row + r) * our_hf_columns +
                                                      tensor.hf_column_first + c)];
      });
    }
  }
  return out;
}

template std::vector<float> laid_out_like<float>(const model::Qwen3MoeParameters&,
                                                 const model::Qwen3MoeParameters&,
                                                 const core::Tensor&);
template std::vector<double> laid_out_like<double>(const model::Qwen3MoeParameters&,
                                                   const model::Qwen3MoeParameters&,
                                                   const core::Tensor&);

std::string tensors_in(const model::Qwen3MoeParameters& parameters, std::int64_t offset,
                       std::int64_t count) {
  std::string names;
  const float* base = parameters.all_values().data<float>();
  for (const auto& tensor : parameters.hf_tensors()) {
    const std::int64_t at = tensor.value.data<float>() - base;
    if (at < offset + count && at + tensor.value.numel() > offset)
      names += (names.empty() ? "" : ", ") + tensor.name;
  }
  return names;
}

void check_state_division(train::StepEngine& engine, dist::ParallelState& parallel_state,
                          const train::AdamWOptimizer& optimizer, const Check& check) {
  const parallel::OptimizerShards& shards = engine.sharded_state_sync()->shards();
  const parallel::ParameterPartition& partition = engine.partition();
  const int pool = parallel_state.pool().size();
  const int expert_data_parallel = parallel_state.expert_data_parallel().size();
  const std::int64_t dense = shards.dense.owned().count();
  const std::int64_t expert = shards.expert.owned().count();
  const auto within = [](std::int64_t piece, std::int64_t total, int shards_count) {
    return piece >= total / shards_count && piece <= (total + shards_count - 1) / shards_count;
  };
  check(within(dense, partition.dense_elements, pool),
        "dense piece " + std::to_string(dense) + " of " + std::to_string(partition.dense_elements) +
            " over " + std::to_string(pool) + " ranks");
  check(within(expert, partition.expert_elements, expert_data_parallel),
        "expert piece " + std::to_string(expert) + " of " +
            std::to_string(partition.expert_elements) + " over " +
            std::to_string(expert_data_parallel) + " ranks");
  check(optimizer.exp_avg().numel() == dense + expert &&
            optimizer.exp_avg_sq().numel() == dense + expert &&
            optimizer.owned_state_bytes() == 8 * (dense + expert),
        "moments allocated for the owned pieces only: " +
            std::to_string(optimizer.exp_avg().numel()) + " elements, " +
            std::to_string(optimizer.owned_state_bytes()) + " bytes");
  std::int64_t sums[3] = {dense, expert * expert_data_parallel, partition.expert_elements};
  parallel_state.pool().all_reduce(sums, sums, 3, core::DType::i64, dist::ReduceOp::sum);
  check(sums[0] == partition.dense_elements, "dense pieces over the pool add up to " +
                                                 std::to_string(sums[0]) + ", not " +
                                                 std::to_string(partition.dense_elements));
  check(sums[1] == sums[2], "expert pieces over the pool cover every EP index's experts once");
}

// Memory really is divided: this stage's dense parameters whole, its experts 1/ep, over the EP
// group every expert exactly once, over the stages every tensor of the whole model exactly once;
// and the seeded slice is the reference's values there.
void check_memory_division(const Options& options, const config::ModelArchitecture& architecture,
                           const model::ModelPart& part, const model::Qwen3MoeParameters& ours,
                           const model::Qwen3MoeParameters& reference_parameters,
                           dist::ParallelState& parallel_state, int etp, const Check& check) {
  const model::Qwen3MoeParameters full(architecture, {}, core::DType::f32, core::Device::cpu, {},
                                       part);
  std::int64_t stage_tensors[2] = {static_cast<std::int64_t>(full.hf_tensors().size()), 0};
  for (const auto& tensor : full.hf_tensors()) {
    // A tied head's copy on the last stage is the first stage's embedding.
    if (full.holds_tied_head_copy() && tensor.name == "model.embed_tokens.weight")
      --stage_tensors[0];
    stage_tensors[1] += reference_parameters.find(tensor.name) != nullptr ? 0 : 1;
  }
  parallel_state.pipeline().all_reduce(stage_tensors, stage_tensors, 2, core::DType::i64,
                                       dist::ReduceOp::sum);
  check(stage_tensors[0] == static_cast<std::int64_t>(reference_parameters.hf_tensors().size()) &&
            stage_tensors[1] == 0,
        "the stages hold " + std::to_string(stage_tensors[0]) + " tensors, each of the " +
            std::to_string(reference_parameters.hf_tensors().size()) + " of the whole model once");
  const int ep = parallel_state.expert_parallel().size();
  const auto expert_elements = [](const model::Qwen3MoeParameters& parameters) {
    std::int64_t count = 0;
    for (const auto& tensor : parameters.hf_tensors())
      if (tensor.is_expert) count += tensor.value.numel();
    return count;
  };
  std::int64_t experts_held = expert_elements(ours);
  const std::int64_t every_expert = expert_elements(full);
  const std::int64_t dense = full.num_parameters() - every_expert;  // incl. alignment gaps
  if (options.tp == 1) {
    check(experts_held * ep == every_expert && ours.num_parameters() == dense + every_expert / ep &&
              ours.all_grads().numel() == ours.num_parameters(),
          "this rank holds " + std::to_string(ours.num_parameters()) + " parameters = dense " +
              std::to_string(dense) + " + experts " + std::to_string(experts_held) +
              " (the whole model's " + std::to_string(every_expert) + " / ep " +
              std::to_string(ep) + ")");
  } else {
    // Every split tensor's piece is 1/tp (experts 1/etp) of the whole, whole ones whole.
    std::string wrong;
    for (const auto& tensor : ours.hf_tensors()) {
      const std::int64_t parts = tensor.split == model::TensorSplit::tensor_parallel ? options.tp
                                 : tensor.split == model::TensorSplit::expert_tensor_parallel ? etp
                                                                                              : 1;
      if (tensor.value.numel() * parts != tensor.hf_numel()) wrong += " " + tensor.name;
    }
    check(wrong.empty(), "every tensor-parallel piece is its share of the whole:" + wrong);
    experts_held *= etp;  // the expert-TP group's pieces make whole experts
  }
  parallel_state.expert_parallel().all_reduce(&experts_held, &experts_held, 1, core::DType::i64,
                                              dist::ReduceOp::sum);
  check(experts_held == every_expert, "the EP group's slices add up to every expert once");
  const std::vector<float> initial =
      laid_out_like(ours, reference_parameters, reference_parameters.all_values());
  check(std::memcmp(initial.data(), host_floats(ours.all_values()).data(),
                    initial.size() * sizeof(float)) == 0,
        "seeded init of this rank's slice equals the whole model's values there");
}

// The exchange asked for is the one that ran: only the ring moves point-to-point bytes, and it
// does whenever a microbatch ran on a group of two or more (a2a+p2p: on a group larger than the
// inner size); only the a2a exchanges move all-to-all bytes over the CP groups (EP's all-to-all
// runs on the EP group). With pipeline stages, activations crossed them.
void check_exchange_ran(const Options& options, train::StepEngine& engine,
                        dist::ParallelState& parallel_state, const train::StepOutcome& outcome,
                        const Check& check) {
  const dist::CommCounters subgroups = engine.cp_exchange().subgroup_counters();
  // The pipeline's point-to-point transfers are not the CP ring's.
  const std::uint64_t pipeline_bytes =
      parallel_state.pipeline().counters()[dist::CommOp::send_recv].bytes_sent;
  std::int64_t bytes[2] = {
      static_cast<std::int64_t>(
          parallel_state.total_counters()[dist::CommOp::send_recv].bytes_sent +
          subgroups[dist::CommOp::send_recv].bytes_sent - pipeline_bytes),
      static_cast<std::int64_t>(subgroups[dist::CommOp::all_to_all].bytes_sent)};
  if (options.pp > 1) {
    check(pipeline_bytes > 0, "activations and gradients crossed stages: " +
                                  std::to_string(pipeline_bytes) + " bytes sent");
    check(outcome.pipeline_bubble_fraction >= 0 && outcome.pipeline_bubble_fraction < 1,
          "measured bubble " + std::to_string(outcome.pipeline_bubble_fraction));
  }
  std::vector<const dist::Comm*> cp_groups;
  for (const auto& [size, count] : outcome.group_sizes) {
    if (size < 2) continue;
    const dist::Comm* group =
        options.dynamic ? &parallel_state.dynamic_group(size) : &parallel_state.context_parallel();
    if (std::find(cp_groups.begin(), cp_groups.end(), group) != cp_groups.end()) continue;
    cp_groups.push_back(group);
    bytes[1] += static_cast<std::int64_t>(group->counters()[dist::CommOp::all_to_all].bytes_sent);
  }
  parallel_state.pool().all_reduce(bytes, bytes, 2, core::DType::i64, dist::ReduceOp::sum);
  const int largest = outcome.group_sizes.rbegin()->first;
  const bool split = largest > 1;
  const config::CpCommType type = options.cp_comm_type;
  const bool ring = type == config::CpCommType::p2p ||
                    (type == config::CpCommType::a2a_p2p && largest > options.hierarchical_inner);
  // The all-to-all runs on groups of min(c, inner) under a2a+p2p: none with inner 1.
  const bool all_to_all = type == config::CpCommType::a2a ||
                          (type == config::CpCommType::a2a_p2p && options.hierarchical_inner > 1);
  check(ring && split ? bytes[0] > 0 : bytes[0] == 0,
        "ring (send_recv) bytes over the pool: " + std::to_string(bytes[0]));
  check(all_to_all && split ? bytes[1] > 0 : bytes[1] == 0,
        "CP all-to-all bytes over the pool: " + std::to_string(bytes[1]));
  if (options.mix_group_sizes) {
    std::string sizes;
    for (const auto& [size, count] : outcome.group_sizes) sizes += " " + std::to_string(size);
    check(outcome.group_sizes.size() == 4 && outcome.group_sizes.count(1) == 1 &&
              outcome.group_sizes.count(2) == 1 && outcome.group_sizes.count(4) == 1 &&
              outcome.group_sizes.count(8) == 1,
          "the step mixes group sizes 1, 2, 4 and 8; it used" + sizes);
  }
}

}  // namespace dyncp::equivalence
