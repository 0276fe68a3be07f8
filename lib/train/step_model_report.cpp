#include "train/step_model_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "model/qwen3_moe_parameters.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_model.hpp"
#include "train/memory_estimate.hpp"

namespace dyncp::train {

namespace {

packing::StepModelInput base_input(const config::ConfigContainer& config) {
  const MemoryEstimateInput memory = memory_estimate_input(config);
  packing::StepModelInput input;
  input.architecture = memory.architecture;
  input.bf16 = memory.bf16_products;
  input.recompute_full = memory.recompute_full;
  input.cp_comm_type = memory.cp_comm_type;
  input.hierarchical_inner_size = memory.hierarchical_inner_size;
  input.pool_size = config.layout.pool_size;
  input.expert_model_parallel_size = memory.expert_model_parallel_size;
  const std::int64_t stored =
      count_parameters(memory.architecture, input.expert_model_parallel_size);
  input.expert_parameters =
      count_expert_parameters(memory.architecture, input.expert_model_parallel_size);
  input.dense_parameters = stored - input.expert_parameters;
  if (config.layout.tensor_model_parallel_size > 1) {
    // One TP rank: its share of the split tensors, the model's own count of what it holds.
    const model::TensorParallelShape shape{
        static_cast<int>(config.layout.tensor_model_parallel_size), 0,
        static_cast<int>(config.layout.expert_tensor_parallel_size), 0,
        config.model.sequence_parallel};
    input.tensor_model_parallel_size = shape.size;
    input.expert_tensor_parallel_size = shape.expert_size;
    input.sequence_parallel = shape.sequence_parallel;
    input.rank_architecture = model::local_architecture(memory.architecture, shape);
    const std::int64_t experts = memory.architecture.num_experts /
                                 std::max<std::int64_t>(input.expert_model_parallel_size, 1);
    std::int64_t dense = 0;
    const std::int64_t total = model::Qwen3MoeParameters::count(
        memory.architecture, {0, std::max<std::int64_t>(experts, 1)}, &dense, shape);
    input.dense_parameters = dense;
    input.expert_parameters = total - dense;
  }
  input.distributed_optimizer = memory.distributed_optimizer;
  input.moment_bytes = memory.exp_avg_bytes + memory.exp_avg_sq_bytes;
  input.overlap_grad_reduce = config.ddp.overlap_grad_reduce;
  input.overlap_param_gather = config.ddp.overlap_param_gather;
  input.moe_shared_expert_overlap = config.model.moe_shared_expert_overlap;
  return input;
}

std::string ms(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f ms", seconds * 1e3);
  return buffer;
}

}  // namespace

ModelledStep model_recipe_step(const config::ConfigContainer& config,
                               const packing::Schedule* schedule,
                               std::span<const std::int64_t> lengths,
                               const packing::StepModelParameters& parameters) {
  ModelledStep step;
  step.input = base_input(config);
  const packing::CostModel cost(packing::model_cost_from_architecture(step.input.architecture), {});
  const packing::AlignmentRule alignment = packing::alignment_rule(config);
  const auto& model = config.model;
  const std::int64_t cap = model.max_seqlen_per_dp_cp_rank.value_or(model.seq_length);
  std::ostringstream basis;
  if (schedule != nullptr && schedule->num_microbatches() > 0) {
    // Every rank of the previewed step; the slowest one is the step.
    for (const auto& group : schedule->groups) {
      for (const std::int64_t id : schedule->ids_of(group)) {
        const std::int64_t padded =
            alignment.padded(lengths[static_cast<std::size_t>(id)], group.size);
        step.input.step_model_flops += cost.sequence_flops(padded);
      }
    }
    for (const std::int64_t length : lengths) step.input.step_real_tokens += length;
    std::int64_t slowest = -1;
    for (std::int64_t rank = 0; rank < schedule->pool_size; ++rank) {
      packing::StepModelInput input = step.input;
      input.bins.clear();
      for (std::int64_t m = 0; m < schedule->num_microbatches(); ++m) {
        const packing::ScheduleGroup& group = schedule->group_of(m, rank);
        packing::ModelledBin bin;
        bin.group_size = group.size;
        for (const std::int64_t id : schedule->ids_of(group))
          bin.lengths.push_back(
              alignment.padded(lengths[static_cast<std::size_t>(id)], group.size));
        input.bins.push_back(std::move(bin));
      }
      packing::StepModel candidate = packing::model_step(input, parameters);
      if (slowest < 0 || candidate.step_seconds > step.model.step_seconds) {
        slowest = rank;
        step.model = std::move(candidate);
        step.input.bins = std::move(input.bins);
      }
    }
    basis << "the previewed first step: " << lengths.size() << " samples, "
          << schedule->num_microbatches() << " microbatches; the slowest rank, " << slowest;
    step.basis = basis.str();
    return step;
  }
  // Nominal: every sample seq_length tokens, on the group it needs, as many per bin as fit.
  const std::int64_t pool = std::max<std::int64_t>(config.layout.pool_size, 1);
  const bool dynamic = model.dynamic_context_parallel;
  const std::int64_t group =
      dynamic ? packing::group_size_needed(model.seq_length, cap,
                                           model.min_dynamic_context_parallel_size, alignment)
              : std::max<std::int64_t>(model.context_parallel_size, 1);
  const std::int64_t padded = alignment.padded(model.seq_length, group);
  const std::int64_t per_bin = std::max<std::int64_t>(group * cap / padded, 1);
  const std::int64_t groups = std::max<std::int64_t>(pool / group, 1);
  const std::int64_t samples = config.train.global_batch_size;
  const std::int64_t microbatches = (samples + groups * per_bin - 1) / (groups * per_bin);
  step.input.step_real_tokens = samples * model.seq_length;
  step.input.step_model_flops = static_cast<double>(samples) * cost.sequence_flops(padded);
  for (std::int64_t m = 0; m < microbatches; ++m)
    step.input.bins.push_back(
        {group, std::vector<std::int64_t>(static_cast<std::size_t>(per_bin), padded)});
  step.model = packing::model_step(step.input, parameters);
  basis << "nominal step (no data preview): " << samples << " samples of " << model.seq_length
        << " tokens, " << per_bin << " per bin on groups of " << group << ", " << microbatches
        << " microbatches";
  step.basis = basis.str();
  return step;
}

std::string format_step_model_report(const config::ConfigContainer& config,
                                     const packing::Schedule* schedule,
                                     std::span<const std::int64_t> lengths) {
  const packing::StepModelParameters parameters = packing::step_model_parameters(config.packing);
  const ModelledStep step = model_recipe_step(config, schedule, lengths, parameters);
  const bool hybrid = step.input.architecture.is_hybrid();
  std::ostringstream out;
  out << "modelled GPU step (docs/step-model.md; the packing.step_model_* table, H200 SXM by "
         "default"
      << (config.dist.device == config::Device::cpu ? "; this recipe runs on the CPU" : "") << "; "
      << (step.input.bf16 ? "bf16_mixed" : "fp32")
      << (step.input.recompute_full ? ", recompute full" : "")
      << (hybrid ? std::string("; Gated DeltaNet ") + config::to_string(parameters.deltanet_kernel)
                 : std::string())
      << "):\n  basis: " << step.basis << "\n"
      << packing::format_step_model(step.model, parameters);
  if (hybrid) {
    // The same step with the other Gated DeltaNet design.
    packing::StepModelParameters other = parameters;
    other.deltanet_kernel = parameters.deltanet_kernel == config::DeltaNetKernel::chunked
                                ? config::DeltaNetKernel::token_by_token
                                : config::DeltaNetKernel::chunked;
    const packing::StepModel alternative = packing::model_step(step.input, other);
    const packing::StepModel& chunked =
        parameters.deltanet_kernel == config::DeltaNetKernel::chunked ? step.model : alternative;
    const packing::StepModel& token =
        parameters.deltanet_kernel == config::DeltaNetKernel::chunked ? alternative : step.model;
    const double chunked_gdn = chunked.row(packing::StepOpClass::deltanet).seconds();
    const double token_gdn = token.row(packing::StepOpClass::deltanet).seconds();
    char line[320];
    std::snprintf(line, sizeof line,
                  "  Gated DeltaNet by kernel design: token_by_token %s, chunked %s (%.1fx); "
                  "step %s vs %s (%.2fx); MFU %.1f%% vs %.1f%%\n",
                  ms(token_gdn).c_str(), ms(chunked_gdn).c_str(),
                  chunked_gdn > 0 ? token_gdn / chunked_gdn : 0.0, ms(token.step_seconds).c_str(),
                  ms(chunked.step_seconds).c_str(),
                  chunked.step_seconds > 0 ? token.step_seconds / chunked.step_seconds : 0.0,
                  100.0 * token.mfu, 100.0 * chunked.mfu);
    out << line;
  }
  return out.str();
}

}  // namespace dyncp::train
