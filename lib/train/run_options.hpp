#pragma once
// The options of each part of a run, each from one function named for what it builds, so the
// run itself holds no field-by-field translation of the config. The cost model's parameters
// come from packing::cost_model_parameters (packing/cost_model.hpp), which the dry run and
// dyncp-plan use too.

#include <cstdint>

#include "config/config_container.hpp"
#include "core/tensor.hpp"
#include "model/qwen3_moe_model.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/lr_schedule.hpp"
#include "train/optimizer.hpp"
#include "train/step_engine.hpp"

namespace dyncp::train {

// Recompute (full: every layer or the first recompute_num_layers; selective: the built
// modules, a config error naming model.recompute_modules for one that is not), the aux loss,
// this rank's experts, the device, the compute precision and the MoE kernels (grouped GEMM,
// fused permutation).
model::ModelOptions model_options_for(const config::ConfigContainer& config,
                                      const parallel::ParallelPlan& plan, core::Device device);

// The scheduler, capacity and padding rule of the plan, the CP exchange, the cost model and the
// gradient reduction (all-reduce, or reduce-scatter for the distributed optimizer).
StepEngineOptions step_engine_options_for(const config::ConfigContainer& config,
                                          const parallel::ParallelPlan& plan,
                                          std::int32_t pad_token_id);

// Adam's betas, eps, weight decay and the moments' storage dtypes.
AdamWSettings adamw_settings_for(const config::ConfigContainer& config);

// The LR schedule of optimizer.lr / min_lr and scheduler.* (decay over train_iters when
// lr_decay_iters is unset).
LrSchedule lr_schedule_for(const config::ConfigContainer& config);

}  // namespace dyncp::train
