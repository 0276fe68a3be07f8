#include "train/trainer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "config/config_loader.hpp"
#include "config/recompute_modules.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"
#include "data/sampler.hpp"
#include "dist/launch_env.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "dist/routed_comm.hpp"
#include "model/hf_checkpoint.hpp"
#include "ops/grad_norm.hpp"
#include "packing/alignment.hpp"
#include "parallel/expert_gather.hpp"
#include "train/checkpoint_resume.hpp"
#include "train/checkpoint_store.hpp"
#include "train/hf_export.hpp"
#include "train/lr_schedule.hpp"
#include "train/memory_estimate.hpp"
#include "train/optimizer.hpp"
#include "train/output_folders.hpp"
#include "train/progress_bar.hpp"
#include "train/signal_flag.hpp"
#include "train/step_engine.hpp"
#include "train/step_metrics.hpp"
#include "train/tensorboard_writer.hpp"
#include "train/training_checkpoint.hpp"
#include "train/training_data.hpp"
#include "train/training_device.hpp"
#include "train/wandb_sidecar.hpp"

namespace dyncp::train {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rank 0, before the first step: the run id and the resolved configuration, printed and saved
// beside the checkpoints (`<checkpoint.save>/config.yaml`, written through a rename).
void log_run_start(const config::ConfigContainer& config, const std::string& run_id) {
  const std::string yaml = config::dump_config_yaml(config);
  spdlog::info("run id {}; resolved configuration:\n{}", run_id, yaml);
  if (config.checkpoint.save.empty()) return;
  const fs::path folder(config.checkpoint.save);
  fs::create_directories(folder);
  const fs::path temporary = folder / ".config.yaml.tmp";
  core::OutputFile out(temporary);
  out.write("# dyncp-train run " + run_id + ": resolved configuration\n" + yaml);
  out.close();
  fs::rename(temporary, folder / "config.yaml");
}

// Per-rank spread of the step, from one all-reduce (max) over the world: fastest and slowest
// step time and the largest peak resident set. (The straggler wait is timed at the step's
// barriers, train/step_engine.cpp.)
void add_rank_spread(StepMetrics& metrics, dist::Comm& world) {
  double values[3] = {metrics.elapsed_ms, -metrics.elapsed_ms,
                      static_cast<double>(peak_resident_bytes())};
  world.all_reduce(values, values, 3, core::DType::f64, dist::ReduceOp::max);
  metrics.elapsed_ms_max = values[0];
  metrics.elapsed_ms_min = -values[1];
  metrics.peak_memory_bytes = static_cast<std::int64_t>(values[2]);
}

}  // namespace

TrainerReport run_training(const config::ConfigContainer& config, dist::Comm& launch_world) {
  const core::Device device = resolve_training_device(
      config, launch_world.size(), dist::discover_launch_env().local_rank, launch_world.rank());
  // A GPU run sends tensors over NCCL and host metadata over MPI (dist/routed_comm.hpp).
  const std::unique_ptr<dist::Comm> routed_world =
      device == core::Device::cuda
          ? dist::make_routed_world(
                launch_world, 60.0 * static_cast<double>(config.dist.distributed_timeout_minutes))
          : nullptr;
  dist::Comm& world = routed_world ? *routed_world : launch_world;
  TrainerReport report;
  const auto& model_config = config.model;
  const dist::ParallelLayout layout =
      dist::layout_for_world(world.size(), static_cast<int>(model_config.context_parallel_size),
                             static_cast<int>(model_config.expert_model_parallel_size),
                             model_config.dynamic_context_parallel,
                             static_cast<int>(model_config.min_dynamic_context_parallel_size));
  dist::ParallelState parallel_state(world, layout);
  if (config.dist.eager_dynamic_cp_groups && layout.dynamic_context_parallel)
    parallel_state.ensure_all_dynamic_groups();
  spdlog::info("layout: world {} = dp {} x cp {}, ep {}, {} CP, alignment {}", world.size(),
               layout.data_parallel_size, layout.context_parallel_size,
               layout.expert_model_parallel_size,
               layout.dynamic_context_parallel ? "dynamic" : "static",
               layout.dynamic_context_parallel &&
                       config.packing.alignment == config::PackingAlignment::per_group
                   ? std::string("per group (2 x group size)")
                   : "multiple " + std::to_string(config.layout.alignment_multiple));

  // Before any slow start-up work: an unwritable output folder fails now, not at the first save.
  if (world.rank() == 0) require_writable_outputs(config);
  world.barrier();

  TrainingData training_data = open_training_data(config);

  model::ModelOptions model_options;
  model_options.recompute_full =
      model_config.recompute_granularity == config::RecomputeGranularity::full;
  // uniform: every layer, one at a time (Megatron's chunks of recompute_num_layers recompute
  // the same layers; one at a time needs no more memory); block: the first n layers only.
  if (model_options.recompute_full &&
      model_config.recompute_method == config::RecomputeMethod::block)
    model_options.recompute_first_layers = model_config.recompute_num_layers.value_or(1);
  // selective: the modules the config rules accept; core_attn drops nothing (docs/model.md).
  if (model_config.recompute_granularity == config::RecomputeGranularity::selective) {
    for (const auto& module : model_config.recompute_modules)
      if (!config::is_built_recompute_module(module))
        core::throw_config_error("model.recompute_modules",
                                 module + ": not built yet (built: " +
                                     config::recompute_module_names(/*built_only=*/true) + ")");
  }
  model_options.selective = config::selective_recompute(model_config);
  model_options.aux_loss =
      model_config.moe_router_load_balancing_type == config::LoadBalancingType::none
          ? ops::MoeAuxLossType::none
          : ops::MoeAuxLossType::seq_aux_loss;
  // Under EP this rank holds only its experts' weights, gradients and moments.
  model_options.experts = parallel::local_expert_range(model_config.architecture.num_experts,
                                                       parallel_state.expert_parallel());
  model_options.device = device;
  model_options.precision = config.mixed_precision == config::MixedPrecision::bf16_mixed
                                ? ops::ComputePrecision::bf16
                                : ops::ComputePrecision::fp32;
  model::Qwen3MoeModel model(model_config.architecture, model_options);
  spdlog::info("precision: {}",
               model_options.precision == ops::ComputePrecision::bf16
                   ? "bf16_mixed (matrix products and attention on bf16 weights and activations; "
                     "fp32 master weights, main_grad, Adam update and reductions)"
                   : "fp32");
  // Loads, checkpoints and exports are host code: on the GPU they go through a host copy.
  HostParameters host_parameters(model.parameters());
  const std::string& initial = !config.checkpoint.pretrained_checkpoint.empty()
                                   ? config.checkpoint.pretrained_checkpoint
                                   : model_config.hf_model_path;
  if (!config.checkpoint.pretrained_checkpoint.empty() && !config::has_hf_weights(initial)) {
    // Never start from random weights when initial weights were asked for.
    core::throw_data_error("checkpoint.pretrained_checkpoint",
                           initial +
                               ": no HF checkpoint with weights here (config.json and "
                               "model.safetensors or model.safetensors.index.json)");
  }
  if (!initial.empty() && config::has_hf_weights(initial)) {
    model::load_hf_weights(initial, host_parameters.staging());
    host_parameters.upload();
    spdlog::info("model: {} parameters on this rank loaded from {}",
                 model.parameters().num_parameters(), initial);
  } else {
    model.parameters().init_random(static_cast<std::uint64_t>(config.rng.seed));
    spdlog::info("model: {} parameters on this rank, seeded random init (seed {})",
                 model.parameters().num_parameters(), config.rng.seed);
  }
  if (model_options.experts.count < model_config.architecture.num_experts) {
    spdlog::info("experts: this rank holds [{}, {}) of {} (EP {})", model_options.experts.first,
                 model_options.experts.first + model_options.experts.count,
                 model_config.architecture.num_experts, layout.expert_model_parallel_size);
  }

  StepEngineOptions engine_options;
  engine_options.scheduler = model_config.sequence_packing_scheduler.value_or(
      layout.dynamic_context_parallel ? config::PackingScheduler::default_dynamic_cp
                                      : config::PackingScheduler::dp_balanced);
  engine_options.max_seqlen_per_dp_cp_rank =
      model_config.max_seqlen_per_dp_cp_rank.value_or(model_config.seq_length);
  engine_options.alignment = packing::alignment_rule(config);
  engine_options.fold_alignment_padding = config.dataset.fold_alignment_padding;
  engine_options.pad_token_id = training_data.pad_token_id;
  engine_options.cp_comm_type = model_config.cp_comm_type;
  if (!model_config.hierarchical_context_parallel_sizes.empty()) {
    engine_options.hierarchical_inner_size =
        static_cast<int>(model_config.hierarchical_context_parallel_sizes.front());
  }
  engine_options.cost_model.device_flops_per_second = config.packing.device_flops_per_second;
  engine_options.cost_model.link_bytes_per_second = config.packing.link_bytes_per_second;
  engine_options.cost_model.collective_latency_seconds = config.packing.collective_latency_seconds;
  engine_options.cost_model.microbatch_overhead_seconds =
      config.packing.microbatch_overhead_seconds;
  // cost_aware prices the exchange that runs.
  engine_options.cost_model.cp_comm_type = model_config.cp_comm_type;
  engine_options.cost_model.hierarchical_inner_size = engine_options.hierarchical_inner_size;
  engine_options.distributed_optimizer = config.ddp.use_distributed_optimizer;
  // A sample longer than the largest group can hold can never be scheduled: say which, now,
  // rather than when a global batch first draws it.
  const std::int64_t largest_group =
      layout.dynamic_context_parallel ? layout.pool_size() : layout.context_parallel_size;
  const std::int64_t largest_group_multiple = engine_options.alignment.multiple(largest_group);
  data::require_samples_fit(
      *training_data.source, largest_group * engine_options.max_seqlen_per_dp_cp_rank,
      largest_group_multiple,
      std::to_string(largest_group) + " ranks x model.max_seqlen_per_dp_cp_rank " +
          std::to_string(engine_options.max_seqlen_per_dp_cp_rank));
  StepEngine engine(model, parallel_state, *training_data.source, engine_options);

  // Evaluation: the same held-out batches every time, forward only.
  std::unique_ptr<TrainingData> validation_data;
  std::unique_ptr<StepEngine> validation_engine;
  // eval_iters 0 with an interval set is warned about by the config and evaluates nothing.
  if (config.validation.eval_interval && config.validation.eval_iters > 0) {
    validation_data = std::make_unique<TrainingData>(open_validation_data(config));
    data::require_samples_fit(
        *validation_data->source, largest_group * engine_options.max_seqlen_per_dp_cp_rank,
        largest_group_multiple, "the largest CP group's capacity (validation data)");
    StepEngineOptions validation_options = engine_options;
    validation_options.distributed_optimizer = false;  // forward only: no gradients to shard
    validation_engine = std::make_unique<StepEngine>(model, parallel_state,
                                                     *validation_data->source, validation_options);
  }
  const auto validation_loss = [&]() -> double {
    data::SamplerOptions options = sampler_options(config);
    options.type = data::SamplerType::single;
    data::Sampler held_out(options, validation_data->source->size());
    double loss_sum = 0;
    std::int64_t loss_tokens = 0;
    for (std::int64_t i = 0; i < config.validation.eval_iters; ++i) {
      const StepOutcome outcome = validation_engine->evaluate(held_out.next_global_batch());
      loss_sum += outcome.loss_sum;
      loss_tokens += outcome.loss_tokens;
    }
    return loss_tokens > 0 ? loss_sum / static_cast<double>(loss_tokens) : 0.0;
  };

  AdamWSettings adam;
  adam.beta1 = config.optimizer.adam_beta1;
  adam.beta2 = config.optimizer.adam_beta2;
  adam.eps = config.optimizer.adam_eps;
  adam.weight_decay = config.optimizer.weight_decay;
  const auto state_dtype = [](config::StateDType dtype) {
    return dtype == config::StateDType::bfloat16 ? core::DType::bf16 : core::DType::f32;
  };
  adam.exp_avg_dtype = state_dtype(config.optimizer.exp_avg_dtype);
  adam.exp_avg_sq_dtype = state_dtype(config.optimizer.exp_avg_sq_dtype);
  AdamWOptimizer optimizer =
      engine.sharded_state_sync() != nullptr
          ? AdamWOptimizer(model.parameters(), *engine.sharded_state_sync(), adam)
          : AdamWOptimizer(model.parameters(), engine.partition(), adam);
  if (optimizer.distributed()) {
    spdlog::info(
        "distributed optimizer: this rank holds {} of the state's elements ({:.1f} MiB, exp_avg "
        "{}, exp_avg_sq {}, on {})",
        optimizer.exp_avg().numel(),
        static_cast<double>(optimizer.owned_state_bytes()) / (1024.0 * 1024.0),
        core::dtype_name(optimizer.exp_avg().dtype()),
        core::dtype_name(optimizer.exp_avg_sq().dtype()),
        core::device_name(optimizer.exp_avg().device()));
  }
  LrSchedule lr_schedule;
  lr_schedule.max_lr = config.optimizer.lr;
  lr_schedule.min_lr = config.optimizer.min_lr;
  lr_schedule.warmup_iters = config.scheduler.lr_warmup_iters;
  lr_schedule.decay_iters = config.scheduler.lr_decay_iters.value_or(config.train.train_iters);
  lr_schedule.style = config.scheduler.lr_decay_style;

  // Resume (train/checkpoint_resume.hpp): rank 0 picks and verifies, every rank loads.
  LoopState state;
  state.seed = config.rng.seed;
  // Set when the run resumed from a checkpoint outside checkpoint.save (load is another folder).
  bool resumed_from_elsewhere = false;
  if (const auto resume = agree_on_resume_checkpoint(config.checkpoint, world)) {
    resumed_from_elsewhere = !config.checkpoint.save.empty() &&
                             fs::weakly_canonical(resume->folder.parent_path()) !=
                                 fs::weakly_canonical(fs::path(config.checkpoint.save));
    const AdamWOptimizer::FullSizeMoments moments = optimizer.full_size_moments();
    state = read_training_checkpoint(resume->folder, resume->iteration, host_parameters.staging(),
                                     moments.exp_avg, moments.exp_avg_sq);
    host_parameters.upload();
    optimizer.load_full_size_moments(moments);
    spdlog::info("resumed from {} at iteration {} ({} samples consumed)", resume->folder.string(),
                 state.iteration, state.consumed_samples);
    if (state.lr_schedule_saved) {  // format 1 saved none: this run's settings (warned)
      lr_schedule = resumed_lr_schedule(state.lr_schedule, lr_schedule,
                                        config.scheduler.override_opt_param_scheduler);
    }
  }
  state.lr_schedule = lr_schedule;
  const data::SamplerOptions sampler_options = train::sampler_options(config);
  data::Sampler sampler(sampler_options, training_data.source->size(),
                        {state.epoch, state.index_in_epoch, state.consumed_samples});

  std::unique_ptr<CheckpointStore> store;
  if (!config.checkpoint.save.empty()) {
    store = std::make_unique<CheckpointStore>(config.checkpoint.save,
                                              static_cast<int>(config.checkpoint.most_recent_k));
  }
  // Rank 0 writes; the other ranks of its EP group send it their experts one layer at a time.
  parallel::EpExpertGather expert_gather(parallel_state.expert_parallel());
  const bool writer_group = [&] {
    std::int32_t writer = world.rank() == 0 ? 1 : 0;
    parallel_state.expert_parallel().all_reduce(&writer, &writer, 1, core::DType::i32,
                                                dist::ReduceOp::max);
    return writer != 0;
  }();
  // Returns whether the checkpoint was saved (the same answer on every rank). A failure is
  // logged and training goes on; the caller decides whether it ends the run with exit 1.
  const auto save_checkpoint = [&]() -> bool {
    if (!store) return false;
    // The checkpoint holds every moment whatever the layout: the distributed optimizer's pieces
    // are gathered into temporary buffers the size of this rank's parameters first, and the
    // experts of other EP ranks come through the gather while rank 0 writes.
    const AdamWOptimizer::FullSizeMoments moments = optimizer.full_size_moments();
    optimizer.gather_full_size_moments(moments);
    const model::Qwen3MoeParameters& parameters = host_parameters.download();
    if (writer_group && world.rank() != 0) {
      write_training_checkpoint({}, parameters, moments.exp_avg, moments.exp_avg_sq, state,
                                &expert_gather, /*write=*/false);
    }
    std::int32_t failed = 0;
    if (world.rank() == 0) {
      std::string failure;
      fs::path folder;
      try {
        folder = store->begin(state.iteration);
      } catch (const std::exception& error) {  // core::Error or std::filesystem's
        failure = error.what();
      }
      try {
        // Even when begin() failed: the other ranks of the EP group are gathering.
        write_training_checkpoint(folder, parameters, moments.exp_avg, moments.exp_avg_sq, state,
                                  &expert_gather, /*write=*/failure.empty());
        if (failure.empty())
          spdlog::info("checkpoint saved: {}", store->commit(state.iteration).string());
      } catch (const std::exception& error) {
        if (failure.empty()) failure = error.what();
      }
      if (!failure.empty()) {
        store->abandon(state.iteration);
        spdlog::error("checkpoint at iteration {} failed, the previous one is kept: {}",
                      state.iteration, failure);
        failed = 1;
      }
    }
    world.all_reduce(&failed, &failed, 1, core::DType::i32, dist::ReduceOp::max);
    return failed == 0;
  };
  // Ends the run with exit 1 when the checkpoint that closes it could not be written.
  const auto require_final_save = [&](bool saved) {
    if (!saved) {
      core::throw_runtime_error("the final checkpoint (iteration " +
                                std::to_string(state.iteration) + ") could not be written to " +
                                config.checkpoint.save +
                                "; the trained steps since the last good checkpoint are lost "
                                "(see the error above)");
    }
  };
  const auto stop_without_save_note = [&] {
    spdlog::warn(
        "stop signal {} received at iteration {}: checkpoint.save is not set, so "
        "nothing is saved; exiting",
        stop_signal(), state.iteration);
  };

  // Handlers were installed at start-up by main(); a signal that arrived during start-up
  // stops the run here, before the first step (there is nothing new to save).
  install_stop_signal_handlers();
  {
    std::int32_t stop = stop_requested() ? 1 : 0;
    world.all_reduce(&stop, &stop, 1, core::DType::i32, dist::ReduceOp::max);
    if (stop != 0) {
      spdlog::warn(
          "stop signal received during start-up: exiting before the first step at "
          "iteration {} (nothing to save)",
          state.iteration);
      report.stopped_by_signal = true;
      return report;
    }
  }
  MetricsWriter metrics_writer(world.rank() == 0 ? config.logger.metrics_path : std::string());
  const std::string run_id = world.rank() == 0 ? make_run_id() : std::string();
  if (world.rank() == 0) log_run_start(config, run_id);
  TensorBoardWriter tensorboard(world.rank() == 0 ? config.logger.tensorboard_dir : std::string());
  if (!tensorboard.path().empty()) spdlog::info("TensorBoard events: {}", tensorboard.path());
  // After the metrics file exists: the sidecar follows it from its first row.
  std::unique_ptr<WandbSidecar> wandb;
  if (world.rank() == 0) wandb = std::make_unique<WandbSidecar>(config, run_id);
  // Every row is written: the sidecar logs the rest while the run saves, then it is waited for.
  const auto end_wandb_rows = [&] {
    if (wandb) wandb->close_input();
  };
  const auto finish_wandb = [&] {
    if (wandb) wandb->finish(std::chrono::seconds(120));
  };
  const auto run_start = std::chrono::steady_clock::now();
  const std::int64_t first_iteration = state.iteration;
  bool last_save_ok = true;
  ProgressBar progress(world.rank() == 0, config.train.train_iters);
  LogInterval log_interval;
  while (state.iteration < config.train.train_iters) {
    const auto step_start = std::chrono::steady_clock::now();
    const std::vector<std::int64_t> batch = sampler.next_global_batch();
    const double data_ms = seconds_since(step_start) * 1e3;
    const StepOutcome outcome = engine.forward_backward(batch);

    StepMetrics metrics;
    metrics.run_id = run_id;
    metrics.iteration = state.iteration + 1;
    metrics.train_iters = config.train.train_iters;
    metrics.global_batch_size = config.train.global_batch_size;
    metrics.time = outcome.time;
    metrics.time.data_ms += data_ms;
    metrics.loss = outcome.loss + outcome.aux_loss;
    metrics.grad_norm = std::sqrt(outcome.grad_sum_of_squares);
    metrics.lr = lr_schedule.lr_at(state.iteration);
    const bool finite = std::isfinite(metrics.loss) && std::isfinite(metrics.grad_norm);
    std::int64_t optimizer_comm_bytes = 0;
    const auto optimizer_start = std::chrono::steady_clock::now();
    if (finite) {
      const double clip = ops::clip_coefficient(metrics.grad_norm, config.optimizer.clip_grad);
      const std::uint64_t bytes_before = parallel_state.total_counters().total().bytes_sent;
      optimizer.step(metrics.lr, state.iteration + 1, clip);
      // The distributed optimizer's parameter all-gather belongs to the step's traffic too.
      if (optimizer.distributed()) {
        auto gathered = static_cast<std::int64_t>(
            parallel_state.total_counters().total().bytes_sent - bytes_before);
        parallel_state.pool().all_reduce(&gathered, &gathered, 1, core::DType::i64,
                                         dist::ReduceOp::sum);
        optimizer_comm_bytes = gathered;
      }
    } else {
      ++state.skipped_steps;
      if (config.train.stop_on_nan) {
        core::throw_runtime_error("iteration " + std::to_string(metrics.iteration) +
                                  ": loss or gradient norm is not finite (loss " +
                                  std::to_string(metrics.loss) + ", grad norm " +
                                  std::to_string(metrics.grad_norm) +
                                  "); set train.stop_on_nan=false to skip such steps");
      }
      spdlog::warn("iteration {}: non-finite loss or gradient norm; step skipped",
                   metrics.iteration);
    }
    metrics.time.optimizer_ms = seconds_since(optimizer_start) * 1e3;
    ++state.iteration;
    state.consumed_samples = sampler.position().consumed_samples;
    state.epoch = sampler.position().epoch;
    state.index_in_epoch = sampler.position().index_in_epoch;

    metrics.elapsed_ms = seconds_since(step_start) * 1e3;
    metrics.consumed_samples = state.consumed_samples;
    metrics.loss_tokens = outcome.loss_tokens;
    metrics.real_tokens = outcome.real_tokens;
    metrics.padded_tokens = outcome.padded_tokens;
    metrics.tokens_per_s = static_cast<double>(outcome.real_tokens) / (metrics.elapsed_ms / 1e3);
    metrics.tflops_per_device =
        outcome.model_flops / (metrics.elapsed_ms / 1e3) / 1e12 / world.size();
    metrics.microbatches = outcome.microbatches;
    metrics.group_sizes = outcome.group_sizes;
    metrics.comm_bytes = outcome.comm_bytes + optimizer_comm_bytes;
    if (validation_engine && (state.iteration % *config.validation.eval_interval == 0 ||
                              state.iteration == config.train.train_iters)) {
      metrics.validation_loss = validation_loss();
    }
    metrics.dropped_samples = training_data.skipped_samples;
    metrics.skipped_steps = state.skipped_steps;
    const double seconds_per_step =
        seconds_since(run_start) / static_cast<double>(state.iteration - first_iteration);
    metrics.eta_seconds =
        static_cast<double>(config.train.train_iters - state.iteration) * seconds_per_step;
    add_rank_spread(metrics, world);
    metrics_writer.write(metrics);
    tensorboard.write(metrics);
    if (wandb) wandb->check();
    log_interval.add(metrics, /*skipped=*/!finite, /*nan=*/!finite);
    if (config.logger.log_interval > 0 && metrics.iteration % config.logger.log_interval == 0) {
      progress.clear();
      spdlog::info("{}", format_console_line(metrics, log_interval));
      log_interval.reset();
    }
    if (state.iteration == first_iteration + 1) {
      spdlog::info(
          "memory after the first step: activation arenas high-water {:.1f} MiB, peak "
          "resident {:.1f} MiB on the largest rank (per-arena marks: --verbose)",
          static_cast<double>(model.activation_high_water_bytes()) / (1024.0 * 1024.0),
          static_cast<double>(metrics.peak_memory_bytes) / (1024.0 * 1024.0));
    }
    progress.update(state.iteration, seconds_per_step);
    report.last_loss = metrics.loss;
    ++report.iterations;

    // Every rank must agree to stop on a signal, so the flag is all-reduced.
    std::int32_t stop = stop_requested() ? 1 : 0;
    world.all_reduce(&stop, &stop, 1, core::DType::i32, dist::ReduceOp::max);
    const bool due =
        config.checkpoint.save_interval && state.iteration % *config.checkpoint.save_interval == 0;
    if (stop != 0) {
      report.stopped_by_signal = true;
      end_wandb_rows();
      if (!store) {
        stop_without_save_note();
        finish_wandb();
        return report;
      }
      spdlog::warn("stop signal received: saving a checkpoint at iteration {} and exiting",
                   state.iteration);
      const bool saved = save_checkpoint();
      finish_wandb();
      require_final_save(saved);
      return report;
    }
    if (due && store) last_save_ok = save_checkpoint();
  }
  progress.clear();
  end_wandb_rows();
  const double total_seconds = seconds_since(run_start);
  spdlog::info("trained {} iterations in {:.1f} s", state.iteration - first_iteration,
               total_seconds);
  {
    // Measured against the --dry-run estimate (train/memory_estimate.hpp).
    const MemoryEstimate estimate = estimate_memory(memory_estimate_input(config));
    const double state_bytes = 4.0 * static_cast<double>(model.parameters().all_values().numel() +
                                                         model.parameters().all_grads().numel()) +
                               static_cast<double>(optimizer.owned_state_bytes());
    const double arena_bytes = static_cast<double>(model.activation_high_water_bytes());
    constexpr double mebibyte = 1024.0 * 1024.0;
    spdlog::info(
        "memory: measured {:.1f} MiB (parameters, gradients, optimizer {:.1f} MiB + "
        "activation arenas high-water {:.1f} MiB); dry-run estimate {:.1f} MiB "
        "({:.1f} + {:.1f} MiB)",
        (state_bytes + arena_bytes) / mebibyte, state_bytes / mebibyte, arena_bytes / mebibyte,
        estimate.total_bytes() / mebibyte, estimate.parameter_state_bytes / mebibyte,
        estimate.per_bin_bytes / mebibyte);
  }
  const bool saved_last = report.iterations > 0 && config.checkpoint.save_interval &&
                          state.iteration % *config.checkpoint.save_interval == 0;
  bool final_save_ok = true;
  // A run that trained nothing saves only when it resumed from another folder: what it loaded
  // then lands in its own save folder, as Megatron's end-of-run save does (and a checkpoint
  // converted across devices or layouts this way is byte-identical, gpu_e2e:bitwise_state).
  if (store && (report.iterations > 0 || resumed_from_elsewhere)) {
    // A run whose last periodic save failed saves again: the run's end must be on disk.
    if (!saved_last || !last_save_ok) final_save_ok = save_checkpoint();
  }
  if (!config.checkpoint.export_hf.empty()) {
    const model::Qwen3MoeParameters& parameters = host_parameters.download();
    if (writer_group && world.rank() != 0) {
      model::save_hf_checkpoint(config.checkpoint.export_hf, parameters, model::StoredDType::bf16,
                                0, &expert_gather, /*write=*/false);
    }
    if (world.rank() == 0) {
      model::save_hf_checkpoint(config.checkpoint.export_hf, parameters, model::StoredDType::bf16,
                                0, &expert_gather);
      complete_hf_export(config.checkpoint.export_hf,
                         training_data.tokenizer && !training_data.tokenizer->is_null()
                             ? tokenizer_directory(config)
                             : fs::path(),
                         model::StoredDType::bf16, model_config.architecture);
      spdlog::info("HF weights exported to {}", config.checkpoint.export_hf);
    }
    world.barrier();
  }
  finish_wandb();
  require_final_save(final_save_ok);  // after the export, which may still have worked
  return report;
}

}  // namespace dyncp::train
