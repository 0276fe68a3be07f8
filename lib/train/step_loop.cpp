// The step loop and the end of a run (train/training_run.hpp).

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "ops/grad_norm.hpp"
#include "train/elapsed.hpp"
#include "train/memory_estimate.hpp"
#include "train/signal_flag.hpp"
#include "train/training_run.hpp"

namespace dyncp::train {

namespace {

constexpr double mebibyte = 1024.0 * 1024.0;

// A step whose loss or gradient norm is not finite is skipped (or ends the run with
// train.stop_on_nan); otherwise the gradients are clipped and the optimizer steps. Returns the
// bytes the distributed optimizer's parameter all-gather sent over the pool (0 when skipped or
// replicated): they belong to the step's traffic too.
std::int64_t update_parameters(const config::ConfigContainer& config, OpenedRun& run,
                               BuiltRun& built, LoopState& state, const StepMetrics& metrics,
                               bool finite) {
  if (!finite) {
    ++state.skipped_steps;
    if (config.train.stop_on_nan) {
      core::throw_runtime_error("iteration " + std::to_string(metrics.iteration) +
                                ": loss or gradient norm is not finite (loss " +
                                std::to_string(metrics.loss) + ", grad norm " +
                                std::to_string(metrics.grad_norm) +
                                "); set train.stop_on_nan=false to skip such steps");
    }
    spdlog::warn("iteration {}: non-finite loss or gradient norm; step skipped", metrics.iteration);
    return 0;
  }
  const double clip = ops::clip_coefficient(metrics.grad_norm, config.optimizer.clip_grad);
  const auto bytes_sent = [&] { return built.engine->communication_counters().total().bytes_sent; };
  const std::uint64_t bytes_before = bytes_sent();
  built.optimizer->step(metrics.lr, state.iteration + 1, clip);
  if (!built.optimizer->distributed()) return 0;
  // Counted when started: an overlapped gather's bytes belong to this step too.
  auto gathered = static_cast<std::int64_t>(bytes_sent() - bytes_before);
  run.parallel_state->pool().all_reduce(&gathered, &gathered, 1, core::DType::i64,
                                        dist::ReduceOp::sum);
  return gathered;
}

// What the step measured and produced, in the metrics every sink reports.
void fill_step_metrics(StepMetrics& metrics, const StepOutcome& outcome, const LoopState& state,
                       int world_size) {
  metrics.consumed_samples = state.consumed_samples;
  metrics.loss_tokens = outcome.loss_tokens;
  metrics.real_tokens = outcome.real_tokens;
  metrics.padded_tokens = outcome.padded_tokens;
  metrics.tokens_per_s = static_cast<double>(outcome.real_tokens) / (metrics.elapsed_ms / 1e3);
  metrics.tflops_per_device = outcome.model_flops / (metrics.elapsed_ms / 1e3) / 1e12 / world_size;
  metrics.microbatches = outcome.microbatches;
  metrics.group_sizes = outcome.group_sizes;
  metrics.comm_bytes += outcome.comm_bytes;
}

// One optimizer step: the next global batch, forward/backward on its schedule, the update and
// the loop state moved on. Returns the step's metrics (evaluation and the rank spread are
// added by the caller); `finite` says whether the step was taken.
StepMetrics train_one_step(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built,
                           LoopStart& start, bool& finite) {
  LoopState& state = start.state;
  const auto step_start = std::chrono::steady_clock::now();
  const std::vector<std::int64_t> batch = start.sampler->next_global_batch();
  const double data_ms = milliseconds_since(step_start);
  const StepOutcome outcome = built.engine->forward_backward(batch);

  StepMetrics metrics;
  metrics.iteration = state.iteration + 1;
  metrics.train_iters = config.train.train_iters;
  metrics.global_batch_size = config.train.global_batch_size;
  metrics.time = outcome.time;
  metrics.time.data_ms += data_ms;
  metrics.loss = outcome.loss + outcome.aux_loss;
  metrics.grad_norm = std::sqrt(outcome.grad_sum_of_squares);
  metrics.lr = built.lr_schedule.lr_at(state.iteration);
  finite = std::isfinite(metrics.loss) && std::isfinite(metrics.grad_norm);
  const auto optimizer_start = std::chrono::steady_clock::now();
  metrics.comm_bytes = update_parameters(config, run, built, state, metrics, finite);
  metrics.time.optimizer_ms = milliseconds_since(optimizer_start);

  ++state.iteration;
  const data::SamplerPosition& position = start.sampler->position();
  state.consumed_samples = position.consumed_samples;
  state.epoch = position.epoch;
  state.index_in_epoch = position.index_in_epoch;
  metrics.elapsed_ms = milliseconds_since(step_start);
  fill_step_metrics(metrics, outcome, state, run.world->size());
  return metrics;
}

// Every rank must agree to stop on a signal, so the flag is all-reduced.
bool stop_agreed(dist::Comm& world) {
  std::int32_t stop = stop_requested() ? 1 : 0;
  world.all_reduce(&stop, &stop, 1, core::DType::i32, dist::ReduceOp::max);
  return stop != 0;
}

void log_first_step_memory(const BuiltRun& built, const StepMetrics& metrics) {
  spdlog::info(
      "memory after the first step: activation arenas high-water {:.1f} MiB, peak resident "
      "{:.1f} MiB on the largest rank (per-arena marks: --verbose)",
      static_cast<double>(built.model->activation_high_water_bytes()) / mebibyte,
      static_cast<double>(metrics.peak_memory_bytes) / mebibyte);
}

// Measured against the --dry-run estimate (train/memory_estimate.hpp): with pipeline stages,
// the estimate of this rank's stage.
void log_measured_memory(const config::ConfigContainer& config, const BuiltRun& built,
                         std::int64_t stage) {
  const MemoryEstimate estimate =
      estimate_memory(config.layout.pipeline_model_parallel_size > 1
                          ? memory_estimate_input_for_stage(config, stage, 0)
                          : memory_estimate_input(config));
  const model::Qwen3MoeParameters& parameters = built.model->parameters();
  const double state_bytes =
      4.0 * static_cast<double>(parameters.all_values().numel() + parameters.all_grads().numel()) +
      static_cast<double>(built.optimizer->owned_state_bytes());
  const double arena_bytes = static_cast<double>(built.model->activation_high_water_bytes());
  spdlog::info(
      "memory: measured {:.1f} MiB (parameters, gradients, optimizer {:.1f} MiB + activation "
      "arenas high-water {:.1f} MiB); dry-run estimate {:.1f} MiB ({:.1f} + {:.1f} MiB)",
      (state_bytes + arena_bytes) / mebibyte, state_bytes / mebibyte, arena_bytes / mebibyte,
      estimate.total_bytes() / mebibyte, estimate.parameter_state_bytes / mebibyte,
      estimate.per_bin_bytes / mebibyte);
}

}  // namespace

LoopEnd run_step_loop(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built,
                      LoopStart& start, RunReporting& reporting, TrainerReport& report) {
  LoopState& state = start.state;
  dist::Comm& world = *run.world;
  LoopEnd end;
  const auto loop_start = std::chrono::steady_clock::now();
  const std::int64_t first_iteration = state.iteration;
  while (state.iteration < config.train.train_iters) {
    bool finite = true;
    StepMetrics metrics = train_one_step(config, run, built, start, finite);
    metrics.run_id = reporting.run_id();
    if (built.evaluation && built.evaluation->due(state.iteration))
      metrics.validation_loss = built.evaluation->loss();
    metrics.dropped_samples = run.training_data.skipped_samples;
    metrics.skipped_steps = state.skipped_steps;
    const double seconds_per_step =
        seconds_since(loop_start) / static_cast<double>(state.iteration - first_iteration);
    metrics.eta_seconds =
        static_cast<double>(config.train.train_iters - state.iteration) * seconds_per_step;
    add_rank_spread(metrics, world);
    reporting.record(metrics, finite);
    if (state.iteration == first_iteration + 1) log_first_step_memory(built, metrics);
    reporting.progress(state.iteration, seconds_per_step);
    report.last_loss = metrics.loss;
    ++report.iterations;

    // An asynchronous save started at an earlier step is published once every rank wrote it.
    built.checkpoints->poll();
    if (stop_agreed(world)) {
      end.stopped_by_signal = true;
      break;
    }
    const bool due =
        config.checkpoint.save_interval && state.iteration % *config.checkpoint.save_interval == 0;
    if (due && built.checkpoints->saves()) end.last_save_ok = built.checkpoints->save(state);
  }
  end.seconds = seconds_since(loop_start);
  return end;
}

void finish_stopped_run(const config::ConfigContainer& config, BuiltRun& built,
                        const LoopState& state, RunReporting& reporting) {
  reporting.end_rows();
  if (!built.checkpoints->saves()) {
    spdlog::warn(
        "stop signal {} received at iteration {}: checkpoint.save is not set, so nothing is "
        "saved; exiting",
        stop_signal(), state.iteration);
    reporting.finish();
    return;
  }
  spdlog::warn("stop signal received: saving a checkpoint at iteration {} and exiting",
               state.iteration);
  const bool saved = built.checkpoints->save(state);
  built.checkpoints->wait();  // the final save of a run is waited for
  reporting.finish();
  require_final_save(saved, state, config.checkpoint.save);
}

void finish_run(const config::ConfigContainer& config, OpenedRun& run, BuiltRun& built,
                const LoopStart& start, const LoopEnd& end, RunReporting& reporting,
                const TrainerReport& report) {
  const LoopState& state = start.state;
  reporting.clear_progress();
  reporting.end_rows();
  spdlog::info("trained {} iterations in {:.1f} s", report.iterations, end.seconds);
  log_measured_memory(config, built, run.plan.coordinates.pipeline_parallel_index);
  const bool saved_last = report.iterations > 0 && config.checkpoint.save_interval &&
                          state.iteration % *config.checkpoint.save_interval == 0;
  bool final_save_ok = true;
  // A run that trained nothing saves only when it resumed from another folder: what it loaded
  // then lands in its own save folder, as Megatron's end-of-run save does (and a checkpoint
  // converted across devices or layouts this way is byte-identical, gpu_e2e:bitwise_state).
  if (built.checkpoints->saves() && (report.iterations > 0 || start.resumed_from_elsewhere)) {
    // A run whose last periodic save failed saves again: the run's end must be on disk.
    if (!saved_last || !end.last_save_ok) final_save_ok = built.checkpoints->save(state);
  }
  built.checkpoints->wait();  // the final save of a run is waited for
  if (!config.checkpoint.export_hf.empty()) {
    const TrainingData& data = run.training_data;
    built.checkpoints->export_hf(data.tokenizer && !data.tokenizer->is_null()
                                     ? tokenizer_directory(config)
                                     : std::filesystem::path());
  }
  reporting.finish();
  // After the export, which may still have worked.
  require_final_save(final_save_ok, state, config.checkpoint.save);
}

}  // namespace dyncp::train
