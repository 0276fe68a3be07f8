// Each part's options from the config, by the one function named for it (train/run_options.hpp).

#include "train/run_options.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "packing/cost_model.hpp"
#include "smoke_recipe.hpp"

using namespace dyncp;
using Catch::Matchers::Contains;
using test::smoke_config;

namespace {

parallel::ParallelPlan plan_of(const config::ConfigContainer& config, int rank = 0) {
  return parallel::make_parallel_plan(config, static_cast<int>(config.layout.world_size), rank);
}

}  // namespace

TEST_CASE("model_options_for: recompute, aux loss, experts, device and precision",
          "[train][options]") {
  {
    const auto config = smoke_config(4, {"model.moe_router_load_balancing_type=none"});
    const model::ModelOptions options =
        train::model_options_for(config, plan_of(config, 1), core::Device::cpu);
    CHECK_FALSE(options.recompute_full);
    CHECK(options.recompute_first_layers == -1);
    CHECK(options.aux_loss == ops::MoeAuxLossType::none);
    CHECK(options.experts.first == 4);  // rank 1 is EP position 1 of [0, 1]
    CHECK(options.experts.count == 4);
    CHECK(options.precision == ops::ComputePrecision::fp32);
    CHECK(options.device == core::Device::cpu);
    CHECK(options.moe_grouped_gemm);  // Bridge's defaults
    CHECK(options.moe_permute_fusion);
  }
  {
    const auto config = smoke_config(
        4, {"model.recompute_granularity=full", "model.recompute_method=block",
            "model.recompute_num_layers=1", "model.moe_router_load_balancing_type=aux_loss",
            "model.moe_aux_loss_coeff=0.01", "mixed_precision=bf16_mixed"});
    const model::ModelOptions options =
        train::model_options_for(config, plan_of(config), core::Device::cuda);
    CHECK(options.recompute_full);
    CHECK(options.recompute_first_layers == 1);
    CHECK(options.aux_loss == ops::MoeAuxLossType::seq_aux_loss);
    CHECK(options.precision == ops::ComputePrecision::bf16);
    CHECK(options.device == core::Device::cuda);
  }
  {
    const auto config =
        smoke_config(4, {"model.moe_grouped_gemm=false", "model.moe_permute_fusion=false"});
    const model::ModelOptions options =
        train::model_options_for(config, plan_of(config), core::Device::cuda);
    CHECK_FALSE(options.moe_grouped_gemm);
    CHECK_FALSE(options.moe_permute_fusion);
    CHECK_FALSE(options.moe_router_force_load_balancing);
  }
  {
    const auto config = smoke_config(4, {"model.moe_router_force_load_balancing=true"});
    CHECK(train::model_options_for(config, plan_of(config), core::Device::cpu)
              .moe_router_force_load_balancing);
  }
  {
    const auto config = smoke_config(4, {"model.recompute_granularity=selective",
                                         "model.recompute_modules=[moe_act, layernorm]"});
    const model::ModelOptions options =
        train::model_options_for(config, plan_of(config), core::Device::cpu);
    CHECK(options.selective.moe_act);
    CHECK(options.selective.layernorm);
    CHECK_FALSE(options.selective.mlp);
  }
}

TEST_CASE("model_options_for: a recompute module that is not built is refused by key",
          "[train][options]") {
  const auto config =
      smoke_config(4, {"model.recompute_granularity=selective", "model.recompute_modules=[moe]"});
  CHECK_THROWS_WITH(train::model_options_for(config, plan_of(config), core::Device::cpu),
                    Contains("model.recompute_modules") && Contains("moe: not built yet"));
}

TEST_CASE("step_engine_options_for: the plan's schedule rules, the exchange and the cost model",
          "[train][options]") {
  const auto config = smoke_config(
      4, {"model.cp_comm_type=p2p", "ddp.use_distributed_optimizer=true",
          "dataset.fold_alignment_padding=true", "packing.device_flops_per_second=1e14",
          "packing.microbatch_overhead_seconds=0.002"});
  const parallel::ParallelPlan plan = plan_of(config);
  const train::StepEngineOptions options = train::step_engine_options_for(config, plan, 7);
  CHECK(options.scheduler == plan.scheduler);
  CHECK(options.max_seqlen_per_dp_cp_rank == 128);
  CHECK(options.alignment.mode == plan.alignment.mode);
  CHECK(options.fold_alignment_padding);
  CHECK(options.pad_token_id == 7);
  CHECK(options.cp_comm_type == config::CpCommType::p2p);
  CHECK(options.hierarchical_inner_size == 0);
  CHECK(options.distributed_optimizer);
  const packing::CostModelParameters expected =
      packing::cost_model_parameters(config.packing, config.model);
  CHECK(options.cost_model.device_flops_per_second == 1e14);
  CHECK(options.cost_model.microbatch_overhead_seconds == expected.microbatch_overhead_seconds);
  CHECK(options.cost_model.link_bytes_per_second == expected.link_bytes_per_second);
  CHECK(options.cost_model.cp_comm_type == config::CpCommType::p2p);

  const auto hierarchical = smoke_config(
      8, {"model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[2, 1]"});
  const train::StepEngineOptions a2a =
      train::step_engine_options_for(hierarchical, plan_of(hierarchical), 0);
  CHECK(a2a.hierarchical_inner_size == 2);
  CHECK(a2a.cost_model.hierarchical_inner_size == 2);
}

TEST_CASE("adamw_settings_for and lr_schedule_for", "[train][options]") {
  const auto config = smoke_config(
      2, {"optimizer.adam_beta1=0.8", "optimizer.adam_beta2=0.95", "optimizer.adam_eps=1e-6",
          "optimizer.weight_decay=0.1", "optimizer.use_precision_aware_optimizer=true",
          "optimizer.exp_avg_dtype=bfloat16", "optimizer.lr=0.002", "optimizer.min_lr=0.0001",
          "scheduler.lr_warmup_iters=2", "scheduler.lr_decay_style=cosine"});
  const train::AdamWSettings adam = train::adamw_settings_for(config);
  CHECK(adam.beta1 == 0.8);
  CHECK(adam.beta2 == 0.95);
  CHECK(adam.eps == 1e-6);
  CHECK(adam.weight_decay == 0.1);
  CHECK(adam.exp_avg_dtype == core::DType::bf16);
  CHECK(adam.exp_avg_sq_dtype == core::DType::f32);
  const train::LrSchedule schedule = train::lr_schedule_for(config);
  CHECK(schedule.max_lr == 0.002);
  CHECK(schedule.min_lr == 0.0001);
  CHECK(schedule.warmup_iters == 2);
  CHECK(schedule.decay_iters == config.train.train_iters);  // unset: decay over the run
  CHECK(schedule.style == config::LrDecayStyle::cosine);
  const auto decay = smoke_config(2, {"scheduler.lr_decay_iters=3"});
  CHECK(train::lr_schedule_for(decay).decay_iters == 3);
}
