#include "train/run_options.hpp"

#include <algorithm>

#include "config/recompute_modules.hpp"
#include "core/error.hpp"
#include "packing/cost_model.hpp"
#include "parallel/pipeline_stage.hpp"

namespace dyncp::train {

model::ModelOptions model_options_for(const config::ConfigContainer& config,
                                      const parallel::ParallelPlan& plan, core::Device device) {
  const auto& model = config.model;
  model::ModelOptions options;
  options.recompute_full = model.recompute_granularity == config::RecomputeGranularity::full;
  // uniform: every layer, one at a time (Megatron's chunks of recompute_num_layers recompute
  // the same layers; one at a time needs no more memory); block: the first n layers only.
  if (options.recompute_full && model.recompute_method == config::RecomputeMethod::block)
    options.recompute_first_layers = model.recompute_num_layers.value_or(1);
  // selective: the modules the config rules accept; core_attn drops nothing (docs/model.md).
  if (model.recompute_granularity == config::RecomputeGranularity::selective) {
    for (const auto& module : model.recompute_modules)
      if (!config::is_built_recompute_module(module))
        core::throw_config_error("model.recompute_modules",
                                 module + ": not built yet (built: " +
                                     config::recompute_module_names(/*built_only=*/true) + ")");
  }
  options.selective = config::selective_recompute(model);
  options.aux_loss = model.moe_router_load_balancing_type == config::LoadBalancingType::none
                         ? ops::MoeAuxLossType::none
                         : ops::MoeAuxLossType::seq_aux_loss;
  // Under EP this rank holds only its experts' weights, gradients and moments; under TP its
  // pieces of the split tensors; under pipeline parallelism only its stage's layers (and the
  // embedding or the head).
  options.experts = plan.experts;
  options.tensor_parallel = {
      plan.layout.tensor_model_parallel_size, plan.coordinates.tensor_parallel_index,
      plan.layout.expert_tensor_parallel_size, plan.coordinates.expert_tensor_parallel_index,
      model.sequence_parallel && plan.layout.tensor_model_parallel_size > 1};
  if (plan.pipeline.pipeline_size > 1)
    options.part =
        parallel::stage_model_part(plan.pipeline, plan.coordinates.pipeline_parallel_index);
  options.device = device;
  // The GPU path's grouped expert products and fused dispatch (the CPU ops ignore both).
  options.moe_grouped_gemm = model.moe_grouped_gemm;
  options.moe_permute_fusion = model.moe_permute_fusion;
  options.moe_shared_expert_overlap = model.moe_shared_expert_overlap;
  options.moe_router_force_load_balancing = model.moe_router_force_load_balancing;
  options.precision = config.mixed_precision == config::MixedPrecision::bf16_mixed
                          ? ops::ComputePrecision::bf16
                          : ops::ComputePrecision::fp32;
  return options;
}

StepEngineOptions step_engine_options_for(const config::ConfigContainer& config,
                                          const parallel::ParallelPlan& plan,
                                          std::int32_t pad_token_id) {
  const auto& model = config.model;
  StepEngineOptions options;
  options.scheduler = plan.scheduler;
  options.max_seqlen_per_dp_cp_rank = plan.max_seqlen_per_dp_cp_rank;
  options.alignment = plan.alignment;
  options.fold_alignment_padding = config.dataset.fold_alignment_padding;
  options.pad_token_id = pad_token_id;
  options.cp_comm_type = model.cp_comm_type;
  if (!model.hierarchical_context_parallel_sizes.empty())
    options.hierarchical_inner_size =
        static_cast<int>(model.hierarchical_context_parallel_sizes.front());
  // cost_aware prices the exchange that runs.
  options.cost_model = packing::cost_model_parameters(config.packing, model);
  options.distributed_optimizer = config.ddp.use_distributed_optimizer;
  options.overlap_grad_reduce = config.ddp.overlap_grad_reduce;
  options.overlap_param_gather = config.ddp.overlap_param_gather;
  options.pipeline = plan.pipeline;
  // Megatron's default bucket: max(40M, 1M x data-parallel size) elements.
  options.bucket_elements = config.ddp.bucket_size.value_or(
      std::max<std::int64_t>(40'000'000, std::int64_t{1'000'000} * plan.layout.pool_size()));
  return options;
}

AdamWSettings adamw_settings_for(const config::ConfigContainer& config) {
  const auto state_dtype = [](config::StateDType dtype) {
    return dtype == config::StateDType::bfloat16 ? core::DType::bf16 : core::DType::f32;
  };
  AdamWSettings settings;
  settings.beta1 = config.optimizer.adam_beta1;
  settings.beta2 = config.optimizer.adam_beta2;
  settings.eps = config.optimizer.adam_eps;
  settings.weight_decay = config.optimizer.weight_decay;
  settings.exp_avg_dtype = state_dtype(config.optimizer.exp_avg_dtype);
  settings.exp_avg_sq_dtype = state_dtype(config.optimizer.exp_avg_sq_dtype);
  return settings;
}

LrSchedule lr_schedule_for(const config::ConfigContainer& config) {
  LrSchedule schedule;
  schedule.max_lr = config.optimizer.lr;
  schedule.min_lr = config.optimizer.min_lr;
  schedule.warmup_iters = config.scheduler.lr_warmup_iters;
  schedule.decay_iters = config.scheduler.lr_decay_iters.value_or(config.train.train_iters);
  schedule.style = config.scheduler.lr_decay_style;
  return schedule;
}

}  // namespace dyncp::train
