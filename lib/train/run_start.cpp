// The phases before the first step: open, build, resume (train/training_run.hpp).

#include <spdlog/spdlog.h>

#include <filesystem>

#include "config/config_loader.hpp"
#include "core/error.hpp"
#include "dist/launch_env.hpp"
#include "dist/routed_comm.hpp"
#include "model/hf_checkpoint.hpp"
#include "train/checkpoint_resume.hpp"
#include "train/output_folders.hpp"
#include "train/run_options.hpp"
#include "train/sharded_checkpoint.hpp"
#include "train/signal_flag.hpp"
#include "train/step_metrics.hpp"
#include "train/training_checkpoint.hpp"
#include "train/training_run.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

// The recipe's initial weights: checkpoint.pretrained_checkpoint (which must hold HF weights),
// else model.hf_model_path when it holds them, else a seeded random init.
void load_initial_weights(const config::ConfigContainer& config, model::Qwen3MoeModel& model,
                          HostParameters& host_parameters) {
  const std::string& initial = !config.checkpoint.pretrained_checkpoint.empty()
                                   ? config.checkpoint.pretrained_checkpoint
                                   : config.model.hf_model_path;
  if (!config.checkpoint.pretrained_checkpoint.empty() && !config::has_hf_weights(initial)) {
    // Never start from random weights when initial weights were asked for.
    core::throw_data_error("checkpoint.pretrained_checkpoint",
                           initial +
                               ": no HF checkpoint with weights here (config.json and "
                               "model.safetensors or model.safetensors.index.json)");
  }
  if (!initial.empty() && config::has_hf_weights(initial)) {
    // Loads are host code: on the GPU they go through the host copy.
    model::load_hf_weights(initial, host_parameters.staging());
    host_parameters.upload();
    spdlog::info("model: {} parameters on this rank loaded from {}",
                 model.parameters().num_parameters(), initial);
  } else {
    model.parameters().init_random(static_cast<std::uint64_t>(config.rng.seed));
    spdlog::info("model: {} parameters on this rank, seeded random init (seed {})",
                 model.parameters().num_parameters(), config.rng.seed);
  }
}

void log_precision(ops::ComputePrecision precision) {
  spdlog::info("precision: {}",
               precision == ops::ComputePrecision::bf16
                   ? "bf16_mixed (matrix products and attention on bf16 weights and activations; "
                     "fp32 master weights, main_grad, Adam update and reductions)"
                   : "fp32");
}

void log_experts(const model::ModelOptions& options, const parallel::ParallelPlan& plan,
                 std::int64_t num_experts) {
  if (options.experts.count < num_experts) {
    spdlog::info("experts: this rank holds [{}, {}) of {} (EP {})", options.experts.first,
                 options.experts.first + options.experts.count, num_experts,
                 plan.layout.expert_model_parallel_size);
  }
}

// Pipeline stages: the schedule and every stage's layers (this rank holds stage
// plan.coordinates.pipeline_parallel_index's).
void log_pipeline(const parallel::ParallelPlan& plan) {
  const config::PipelineSplit& split = plan.pipeline;
  if (split.pipeline_size <= 1) return;
  spdlog::info("pipeline: {} stages, {}; the layers by stage:\n{}", split.pipeline_size,
               split.virtual_size > 1
                   ? "interleaved 1F1B over " + std::to_string(split.virtual_size) +
                         " virtual chunks per stage"
                   : std::string("1F1B"),
               split.describe());
}

// Replicated state, or the distributed optimizer's shards when the engine reduce-scatters.
std::unique_ptr<AdamWOptimizer> make_optimizer(const config::ConfigContainer& config,
                                               const model::Qwen3MoeModel& model,
                                               StepEngine& engine) {
  const AdamWSettings settings = adamw_settings_for(config);
  auto optimizer =
      engine.sharded_state_sync() != nullptr
          ? std::make_unique<AdamWOptimizer>(model.parameters(), *engine.sharded_state_sync(),
                                             settings)
          : std::make_unique<AdamWOptimizer>(model.parameters(), engine.partition(), settings);
  if (optimizer->distributed()) {
    spdlog::info(
        "distributed optimizer: this rank holds {} of the state's elements ({:.1f} MiB, exp_avg "
        "{}, exp_avg_sq {}, on {})",
        optimizer->exp_avg().numel(),
        static_cast<double>(optimizer->owned_state_bytes()) / (1024.0 * 1024.0),
        core::dtype_name(optimizer->exp_avg().dtype()),
        core::dtype_name(optimizer->exp_avg_sq().dtype()),
        core::device_name(optimizer->exp_avg().device()));
  }
  return optimizer;
}

}  // namespace

OpenedRun open_run(const config::ConfigContainer& config, dist::Comm& launch_world) {
  OpenedRun run;
  run.device = resolve_training_device(config, launch_world.size(),
                                       dist::discover_launch_env().local_rank, launch_world.rank());
  // A GPU run sends tensors over NCCL and host metadata over MPI (dist/routed_comm.hpp).
  if (run.device == core::Device::cuda) {
    run.routed_world = dist::make_routed_world(
        launch_world, 60.0 * static_cast<double>(config.dist.distributed_timeout_minutes));
  }
  run.world = run.routed_world ? run.routed_world.get() : &launch_world;
  dist::Comm& world = *run.world;
  run.plan = parallel::make_parallel_plan(config, world.size(), world.rank());
  run.parallel_state = std::make_unique<dist::ParallelState>(world, run.plan.layout);
  if (config.dist.eager_dynamic_cp_groups && run.plan.layout.dynamic_context_parallel)
    run.parallel_state->ensure_all_dynamic_groups();
  spdlog::info("layout: {}", parallel::summarize_parallel_plan(run.plan));

  // Before any slow start-up work: an unwritable output folder fails now, not at the first save.
  // One live run per save folder: a second one is refused here (exit 2) naming the first.
  if (world.rank() == 0) {
    require_writable_outputs(config);
    run.run_id = make_run_id();
    if (!config.checkpoint.save.empty()) {
      run.save_lock =
          std::make_unique<SaveFolderLock>(config.checkpoint.save, this_process_holder(run.run_id));
    }
  }
  world.barrier();

  run.training_data = open_training_data(config);
  // A sample longer than the largest group can hold can never be scheduled: say which, now,
  // rather than when a global batch first draws it.
  data::require_samples_fit(
      *run.training_data.source, run.plan.largest_group_tokens(), run.plan.largest_group_multiple(),
      std::to_string(run.plan.largest_cp_group()) + " ranks x model.max_seqlen_per_dp_cp_rank " +
          std::to_string(run.plan.max_seqlen_per_dp_cp_rank));
  return run;
}

BuiltRun build_run(const config::ConfigContainer& config, OpenedRun& run) {
  BuiltRun built;
  const std::int64_t num_experts = config.model.architecture.num_experts;
  const model::ModelOptions model_options = model_options_for(config, run.plan, run.device);
  built.model = std::make_unique<model::Qwen3MoeModel>(config.model.architecture, model_options);
  log_precision(model_options.precision);
  log_pipeline(run.plan);
  // Loads, checkpoints and exports are host code: on the GPU they go through a host copy.
  built.host_parameters = std::make_unique<HostParameters>(built.model->parameters());
  load_initial_weights(config, *built.model, *built.host_parameters);
  log_experts(model_options, run.plan, num_experts);

  const StepEngineOptions engine_options =
      step_engine_options_for(config, run.plan, run.training_data.pad_token_id);
  built.engine = std::make_unique<StepEngine>(*built.model, *run.parallel_state,
                                              *run.training_data.source, engine_options);
  // ddp.overlap_param_gather: whatever reads the parameters between steps waits for the gather
  // the last optimizer step started (the next forward waits bucket by bucket).
  const auto complete_gather = [engine = built.engine.get()] {
    engine->complete_parameter_gather();
  };
  built.host_parameters->set_pending_writes(complete_gather);
  built.evaluation =
      make_held_out_evaluation(config, run.plan, *built.model, *run.parallel_state, engine_options);
  if (built.evaluation) built.evaluation->set_pending_writes(complete_gather);
  built.optimizer = make_optimizer(config, *built.model, *built.engine);
  built.lr_schedule = lr_schedule_for(config);
  built.checkpoints = std::make_unique<CheckpointSaver>(config, *run.world, *run.parallel_state,
                                                        *built.host_parameters, *built.optimizer);
  return built;
}

LoopStart resume_run(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built) {
  // Rank 0 picks and verifies (train/checkpoint_resume.hpp), every rank loads.
  LoopStart start;
  start.state.seed = config.rng.seed;
  if (const auto resume = agree_on_resume_checkpoint(config.checkpoint, *run.world)) {
    start.resumed_from_elsewhere = !config.checkpoint.save.empty() &&
                                   fs::weakly_canonical(resume->folder.parent_path()) !=
                                       fs::weakly_canonical(fs::path(config.checkpoint.save));
    const AdamWOptimizer::FullSizeMoments moments = built.optimizer->full_size_moments();
    // A sharded checkpoint: only the byte ranges of the moments this optimizer keeps.
    start.state = is_sharded_checkpoint(resume->folder)
                      ? read_sharded_checkpoint(
                            resume->folder, resume->iteration, built.host_parameters->staging(),
                            moments.exp_avg, moments.exp_avg_sq, built.optimizer->moment_ranges())
                      : read_training_checkpoint(resume->folder, resume->iteration,
                                                 built.host_parameters->staging(), moments.exp_avg,
                                                 moments.exp_avg_sq);
    built.host_parameters->upload();
    built.optimizer->load_full_size_moments(moments);
    spdlog::info("resumed from {} at iteration {} ({} samples consumed)", resume->folder.string(),
                 start.state.iteration, start.state.consumed_samples);
    if (start.state.lr_schedule_saved) {  // format 1 saved none: this run's settings (warned)
      built.lr_schedule = resumed_lr_schedule(start.state.lr_schedule, built.lr_schedule,
                                              config.scheduler.override_opt_param_scheduler);
    }
  }
  start.state.lr_schedule = built.lr_schedule;
  const LoopState& state = start.state;
  start.sampler = std::make_unique<data::Sampler>(
      sampler_options(config), run.training_data.source->size(),
      data::SamplerPosition{state.epoch, state.index_in_epoch, state.consumed_samples});
  return start;
}

bool stopped_during_startup(dist::Comm& world, std::int64_t iteration) {
  // Handlers were installed at start-up by main(); a signal that arrived during start-up
  // stops the run here, before the first step (there is nothing new to save).
  install_stop_signal_handlers();
  std::int32_t stop = stop_requested() ? 1 : 0;
  world.all_reduce(&stop, &stop, 1, core::DType::i32, dist::ReduceOp::max);
  if (stop == 0) return false;
  spdlog::warn(
      "stop signal received during start-up: exiting before the first step at iteration {} "
      "(nothing to save)",
      iteration);
  return true;
}

}  // namespace dyncp::train
