#include "train/step_engine.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "packing/packed_seq_params.hpp"
#include "packing/run_scheduler.hpp"
#include "train/device_bin.hpp"
#include "train/elapsed.hpp"

namespace dyncp::train {

namespace {

// The time this rank waits at a pool barrier for the slowest rank to arrive. Placed before the
// step's pool-wide reductions, it takes the straggler wait out of their timing: what is left
// there is the reduction itself.
double straggler_wait_ms(dist::Comm& pool) {
  const auto start = std::chrono::steady_clock::now();
  pool.barrier();
  return milliseconds_since(start);
}

}  // namespace

StepEngine::StepEngine(model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
                       const data::SampleSource& source, const StepEngineOptions& options)
    : model_(model),
      parallel_state_(parallel_state),
      source_(source),
      options_(options),
      cost_model_(packing::model_cost_from_architecture(model.architecture()), options.cost_model),
      seams_(parallel_state, model.architecture(),
             {options.cp_comm_type, options.hierarchical_inner_size, &counters_}),
      partition_(parallel::partition_parameters(model.parameters())) {
  const model::ExpertRange& held = model.parameters().expert_range();
  if (held.first != seams_.experts.first_local_expert() ||
      held.count != seams_.experts.num_local_experts()) {
    core::throw_runtime_error(
        "the model holds experts [" + std::to_string(held.first) + ", " +
        std::to_string(held.first + held.count) + ") but this EP rank owns [" +
        std::to_string(seams_.experts.first_local_expert()) + ", " +
        std::to_string(seams_.experts.first_local_expert() + seams_.experts.num_local_experts()) +
        "): build it with ModelOptions::experts = parallel::local_expert_range(...)");
  }
  const model::TensorParallelShape& tp = model.parameters().tensor_parallel();
  const dist::ParallelLayout& layout = parallel_state.layout();
  if (tp.size != layout.tensor_model_parallel_size ||
      tp.index != parallel_state.tensor_parallel().rank() ||
      tp.expert_size != layout.expert_tensor_parallel_size)
    core::throw_runtime_error("the model is built for TP rank " + std::to_string(tp.index) +
                              " of " + std::to_string(tp.size) + " (etp " +
                              std::to_string(tp.expert_size) + ") but this rank is TP rank " +
                              std::to_string(parallel_state.tensor_parallel().rank()) + " of " +
                              std::to_string(layout.tensor_model_parallel_size) + " (etp " +
                              std::to_string(layout.expert_tensor_parallel_size) +
                              "): build it with ModelOptions::tensor_parallel of the plan");
  const bool tensor_parallel = tp.active();
  const core::Tensor& all_grads = model.parameters().all_grads();
  DYNCP_CHECK(!options.overlap_param_gather || options.distributed_optimizer,
              "overlap_param_gather gathers the distributed optimizer's pieces");
  if (options.distributed_optimizer) {
    dist::Comm& pool = parallel_state.pool();
    dist::Comm& expert_data_parallel = parallel_state.expert_data_parallel();
    sharded_state_sync_ = std::make_unique<parallel::ShardedStateSync>(
        parallel::plan_optimizer_shards(partition_, pool.size(), pool.rank(),
                                        expert_data_parallel.size(), expert_data_parallel.rank()),
        pool, expert_data_parallel);
    if (tensor_parallel)
      sharded_state_sync_->set_tensor_parallel(parallel_state.tensor_parallel(), partition_,
                                               all_grads.device());
    const parallel::OptimizerShards& shards = sharded_state_sync_->shards();
    if (options.overlap_grad_reduce) {
      overlapped_reduce_ = std::make_unique<parallel::OverlappedGradientReduce>(
          model.parameters(), pool, expert_data_parallel, options.bucket_elements, &shards);
    }
    if (options.overlap_param_gather) {
      sharded_state_sync_->overlap_parameter_gather(
          std::make_unique<parallel::OverlappedParameterGather>(
              model.parameters(), shards, pool, expert_data_parallel, options.bucket_elements));
    }
  } else {
    gradient_sync_.emplace(partition_, model.parameters().all_grads().data<float>(),
                           parallel_state.pool(), parallel_state.expert_data_parallel(),
                           parallel_state.expert_parallel());
    gradient_sync_->set_device(model.parameters().device());
    if (tensor_parallel)
      gradient_sync_->set_tensor_parallel(parallel_state.tensor_parallel(),
                                          parallel_state.expert_tensor_parallel(), all_grads);
    if (options.overlap_grad_reduce) {
      overlapped_reduce_ = std::make_unique<parallel::OverlappedGradientReduce>(
          model.parameters(), parallel_state.pool(), parallel_state.expert_data_parallel(),
          options.bucket_elements);
    }
  }
  if (overlapped_reduce_ && tensor_parallel)
    overlapped_reduce_->set_tensor_parallel(parallel_state.tensor_parallel(), partition_,
                                            all_grads);
  if (options.pipeline.pipeline_size > 1) {
    if (model.architecture().tie_word_embeddings)
      tied_embedding_group_ = parallel_state.embedding_group();
    pipeline_ = std::make_unique<PipelineExecutor>(
        model, parallel_state, options.pipeline,
        PipelineExecutor::Options{options.cp_comm_type, options.hierarchical_inner_size, &counters_,
                                  seams_.exchange.subgroups});
  }
  if (model.parameters().device() == core::Device::cuda) {
    device_bin_arena_ =
        std::make_unique<core::Arena>("step.device_bin", std::size_t{1} << 20, core::Device::cuda);
  }
}

const model::PackedBin& StepEngine::upload_bin(const model::PackedBin& host_bin) {
  if (!device_bin_arena_) return host_bin;
  return train::upload_bin(*device_bin_arena_, host_bin, device_bin_);
}

packing::Schedule StepEngine::make_schedule(std::span<const std::int64_t> real_lengths) const {
  const dist::ParallelLayout& layout = parallel_state_.layout();
  packing::SchedulerInput input;
  input.lengths = real_lengths;
  input.alignment = options_.alignment;
  input.data_parallel_size = layout.data_parallel_size;
  input.context_parallel_size = layout.context_parallel_size;
  input.max_seqlen_per_dp_cp_rank = options_.max_seqlen_per_dp_cp_rank;
  input.min_group_size = layout.min_dynamic_context_parallel_size;
  return packing::run_scheduler(options_.scheduler, input, cost_model_);
}

dist::Comm* StepEngine::runtime_group(std::int64_t size) {
  if (size == 1) return nullptr;
  if (parallel_state_.layout().dynamic_context_parallel) {
    return &parallel_state_.dynamic_group(static_cast<int>(size));
  }
  DYNCP_CHECK(size == parallel_state_.layout().context_parallel_size,
              "a static layout runs every microbatch on its CP group");
  return &parallel_state_.context_parallel();
}

void StepEngine::synchronise_gradients(bool overlapped) {
  // A tied LM head: the last stage's copy and the first stage's embedding are one tensor, so
  // their local gradients are summed over the embedding group before the pool sums them
  // (Megatron's embedding group); both stages then take the same update.
  if (tied_embedding_group_ != nullptr) {
    const core::Tensor& grad = model_.parameters().embed_tokens.grad;
    tied_embedding_group_->all_reduce(grad.raw_data(), grad.raw_data(),
                                      static_cast<std::size_t>(grad.numel()), grad.dtype(),
                                      dist::ReduceOp::sum);
  }
  if (overlapped) {
    overlapped_reduce_->finish();  // the buckets the backward left, then the wait
  } else if (sharded_state_sync_) {
    sharded_state_sync_->reduce_scatter(model_.parameters().all_grads());
  } else {
    gradient_sync_->reduce_gradients();
  }
}

void StepEngine::complete_parameter_gather() {
  if (sharded_state_sync_) sharded_state_sync_->complete_parameter_gather();
}

dist::CommCounters StepEngine::communication_counters() const {
  dist::CommCounters counters = parallel_state_.total_counters();
  counters += seams_.exchange.subgroup_counters();
  if (overlapped_reduce_) counters += overlapped_reduce_->counters();
  if (const parallel::OverlappedParameterGather* gather = overlapped_parameter_gather())
    counters += gather->counters();
  return counters;
}

model::BinOptions StepEngine::bin_options_for(bool compute_gradients, double inverse_tokens,
                                              std::int64_t batch_size) {
  model::BinOptions bin_options;
  bin_options.compute_gradients = compute_gradients;
  bin_options.loss_grad_scale = inverse_tokens;
  bin_options.aux_num_sequences_global = batch_size;
  bin_options.aux_loss_grad_scale = 1.0;
  // The first microbatch's forward waits for each layer's gathered parameters before using
  // them (later ones find every bucket waited for).
  parallel::OverlappedParameterGather* gather =
      sharded_state_sync_ ? sharded_state_sync_->overlapped_parameter_gather() : nullptr;
  if (gather != nullptr && gather->pending()) {
    bin_options.before_layer_forward = [gather](std::int64_t layer) {
      gather->wait_for_layer(layer);
    };
  }
  return bin_options;
}

void StepEngine::run_microbatches(std::int64_t microbatches, const model::BinOptions& options,
                                  bool overlap, double local_sums[2], StepOutcome& outcome) {
  for (std::int64_t m = 0; m < microbatches; ++m) {
    const auto& p = microbatch_params_[static_cast<std::size_t>(m)];
    const auto build_start = std::chrono::steady_clock::now();
    const model::PackedBin& bin =
        upload_bin(bin_builder_.build(p, microbatch_samples_[static_cast<std::size_t>(m)]));
    outcome.time.data_ms += milliseconds_since(build_start);
    dist::Comm* group = runtime_group(p.group_size);
    seams_.set_group(group);
    model::BinOptions bin_options = options;
    // The last microbatch's backward finishes each layer's gradient: its buckets start then.
    if (overlap && m + 1 == microbatches) {
      bin_options.after_layer_backward = [this](std::int64_t layer) {
        overlapped_reduce_->layer_done(layer);
      };
    }
    const model::BinResult result = model_.run_bin(bin, seams_.seams(), bin_options);
    local_sums[0] += result.loss_sum;
    if (p.rank_in_group == 0) local_sums[1] += result.aux_loss;
  }
}

void StepEngine::run_pipeline(std::int64_t microbatches, const model::BinOptions& options,
                              bool overlap, double local_sums[2], StepOutcome& outcome) {
  pipeline_microbatches_.clear();
  for (std::int64_t m = 0; m < microbatches; ++m) {
    const auto& p = microbatch_params_[static_cast<std::size_t>(m)];
    pipeline_microbatches_.push_back(
        {&p, microbatch_samples_[static_cast<std::size_t>(m)], runtime_group(p.group_size)});
  }
  // Each chunk's last backward finishes its layers' gradients: their buckets start then.
  std::function<void(std::int64_t)> layer_done;
  if (overlap) layer_done = [this](std::int64_t layer) { overlapped_reduce_->layer_done(layer); };
  const PipelineExecutor::Result result =
      pipeline_->run(pipeline_microbatches_, options, std::move(layer_done));
  local_sums[0] += result.loss_sum;
  local_sums[1] += result.aux_loss;
  outcome.pipeline_bubble_fraction = result.bubble_fraction;
  outcome.pipeline_busy_ms = result.busy_ms;
  outcome.pipeline_wall_ms = result.wall_ms;
}

StepOutcome StepEngine::forward_backward(std::span<const std::int64_t> sample_ids) {
  return run(sample_ids, /*compute_gradients=*/true);
}

StepOutcome StepEngine::evaluate(std::span<const std::int64_t> sample_ids) {
  return run(sample_ids, /*compute_gradients=*/false);
}

StepOutcome StepEngine::run(std::span<const std::int64_t> sample_ids, bool compute_gradients) {
  StepOutcome outcome;
  const auto batch_size = static_cast<std::int64_t>(sample_ids.size());
  // Schedules name pool ranks: a stage's dp x cp position (under tensor parallelism every TP
  // rank of a pool position runs the same bins).
  const std::int64_t rank = parallel_state_.coordinates().pool_rank;
  counters_.reset();
  // Bytes over every communicator of the engine.
  const auto bytes_so_far = [&] { return communication_counters().total().bytes_sent; };
  // Forward only (evaluation): a started parameter gather is waited for whole before any read;
  // training steps wait bucket by bucket in the forward (bin_options_for).
  if (!compute_gradients) complete_parameter_gather();
  const std::uint64_t bytes_before = bytes_so_far();
  const auto& traffic = core::device_traffic();
  const std::uint64_t device_bytes_before =
      traffic.host_to_device_bytes.load() + traffic.device_to_host_bytes.load();

  // Lengths and the schedule: the same on every rank, no communication.
  auto clock = std::chrono::steady_clock::now();
  real_lengths_.resize(sample_ids.size());
  for (std::int64_t i = 0; i < batch_size; ++i) {
    const auto length = source_.length(sample_ids[static_cast<std::size_t>(i)]);
    real_lengths_[static_cast<std::size_t>(i)] = length;
    outcome.real_tokens += length;
  }
  schedule_ = make_schedule(real_lengths_);
  outcome.microbatches = schedule_.num_microbatches();
  std::vector<int> sizes;
  for (const packing::ScheduleGroup& group : schedule_.groups) {
    // Padding is decided now: each sequence is padded for the group that runs it.
    for (const std::int64_t id : schedule_.ids_of(group)) {
      const std::int64_t padded =
          options_.alignment.padded(real_lengths_[static_cast<std::size_t>(id)], group.size);
      outcome.padded_tokens += padded;
      outcome.model_flops += cost_model_.sequence_flops(padded);
    }
    ++outcome.group_sizes[static_cast<int>(group.size)];
    if (std::find(sizes.begin(), sizes.end(), group.size) == sizes.end())
      sizes.push_back(static_cast<int>(group.size));
  }
  if (parallel_state_.layout().dynamic_context_parallel) {
    sizes.erase(std::remove(sizes.begin(), sizes.end(), 1), sizes.end());
    parallel_state_.ensure_dynamic_groups(sizes);
  }
  outcome.time.schedule_ms = milliseconds_since(clock);

  // This rank's samples for every microbatch, and the global loss-token count before forward.
  clock = std::chrono::steady_clock::now();
  const std::int64_t microbatches = schedule_.num_microbatches();
  // Reused from step to step: their capacity stays.
  std::vector<packing::PackedSeqParams>& params = microbatch_params_;
  std::vector<std::vector<data::Sample>>& samples = microbatch_samples_;
  if (static_cast<std::int64_t>(params.size()) < microbatches) {
    params.resize(static_cast<std::size_t>(microbatches));
    samples.resize(static_cast<std::size_t>(microbatches));
  }
  std::int64_t local_loss_tokens = 0;
  for (std::int64_t m = 0; m < microbatches; ++m) {
    auto& p = params[static_cast<std::size_t>(m)];
    // With fold_alignment_padding the padded length is reported as the sequence length.
    p = packing::make_packed_seq_params(schedule_, m, rank, real_lengths_, options_.alignment,
                                        options_.fold_alignment_padding);
    auto& bin = samples[static_cast<std::size_t>(m)];
    bin.clear();
    const std::int64_t multiple = options_.alignment.multiple(p.group_size);
    for (const std::int64_t position : p.sample_ids) {
      bin.push_back(source_.sample(sample_ids[static_cast<std::size_t>(position)], multiple,
                                   options_.pad_token_id));
    }
    for (const packing::TokenRange& range : p.local_ranges) {
      const auto& sample = bin[static_cast<std::size_t>(range.sequence)];
      const std::int64_t start = p.cu_seqlens_padded[static_cast<std::size_t>(range.sequence)];
      for (std::int64_t row = range.begin; row < range.end; ++row)
        local_loss_tokens += sample.loss_mask[static_cast<std::size_t>(row - start)];
    }
  }
  outcome.time.data_ms = milliseconds_since(clock);

  outcome.time.straggler_wait_ms = straggler_wait_ms(parallel_state_.pool());
  clock = std::chrono::steady_clock::now();
  std::int64_t global_loss_tokens = local_loss_tokens;
  parallel_state_.pool().all_reduce(&global_loss_tokens, &global_loss_tokens, 1, core::DType::i64,
                                    dist::ReduceOp::sum);
  outcome.time.grad_sync_ms = milliseconds_since(clock);
  outcome.loss_tokens = global_loss_tokens;
  const double inverse_tokens =
      global_loss_tokens > 0 ? 1.0 / static_cast<double>(global_loss_tokens) : 0.0;

  if (compute_gradients) model_.parameters().zero_grads();
  const bool overlap = compute_gradients && overlapped_reduce_ != nullptr;
  if (overlap) overlapped_reduce_->begin();
  double local_sums[2] = {0.0, 0.0};  // CE sum, aux (once per group)
  const model::BinOptions bin_options =
      bin_options_for(compute_gradients, inverse_tokens, batch_size);
  clock = std::chrono::steady_clock::now();
  if (pipeline_)
    run_pipeline(microbatches, bin_options, overlap, local_sums, outcome);
  else
    run_microbatches(microbatches, bin_options, overlap, local_sums, outcome);
  const double bins_ms = milliseconds_since(clock);
  outcome.time.cp_comm_ms = counters_.cp_comm_ms;
  outcome.time.ep_comm_ms = counters_.ep_comm_ms;
  outcome.time.tp_comm_ms = counters_.tp_comm_ms;
  outcome.time.compute_ms =
      std::max(0.0, bins_ms - counters_.cp_comm_ms - counters_.ep_comm_ms - counters_.tp_comm_ms);

  outcome.time.straggler_wait_ms += straggler_wait_ms(parallel_state_.pool());
  clock = std::chrono::steady_clock::now();
  if (compute_gradients) synchronise_gradients(overlap);
  parallel_state_.pool().all_reduce(local_sums, local_sums, 2, core::DType::f64,
                                    dist::ReduceOp::sum);
  // Stages hold different layers: the loss comes from the last, the aux loss from each.
  dist::Comm& stages = parallel_state_.pipeline();
  stages.all_reduce(local_sums, local_sums, 2, core::DType::f64, dist::ReduceOp::sum);
  if (compute_gradients) {
    const core::Tensor& gradients = model_.parameters().all_grads();
    outcome.grad_sum_of_squares = sharded_state_sync_
                                      ? sharded_state_sync_->global_sum_of_squares(gradients)
                                      : gradient_sync_->global_sum_of_squares();
    stages.all_reduce(&outcome.grad_sum_of_squares, &outcome.grad_sum_of_squares, 1,
                      core::DType::f64, dist::ReduceOp::sum);
  }
  outcome.time.grad_sync_ms += milliseconds_since(clock);

  // Bytes this rank sent in the step, summed over the pool (the sum itself is not counted).
  std::int64_t bytes_sent = static_cast<std::int64_t>(bytes_so_far() - bytes_before);
  parallel_state_.pool().all_reduce(&bytes_sent, &bytes_sent, 1, core::DType::i64,
                                    dist::ReduceOp::sum);
  stages.all_reduce(&bytes_sent, &bytes_sent, 1, core::DType::i64, dist::ReduceOp::sum);
  outcome.comm_bytes = bytes_sent;
  outcome.loss_sum = local_sums[0];
  outcome.aux_loss = local_sums[1];
  outcome.loss = outcome.loss_sum * inverse_tokens;
  outcome.host_device_bytes =
      static_cast<std::int64_t>(traffic.host_to_device_bytes.load() +
                                traffic.device_to_host_bytes.load() - device_bytes_before);
  return outcome;
}

}  // namespace dyncp::train
