#include "train/pipeline_executor.hpp"

#include <chrono>
#include <string>

#include "core/error.hpp"
#include "parallel/pipeline_stage.hpp"
#include "parallel/rank_seams.hpp"
#include "train/bin_builder.hpp"
#include "train/device_bin.hpp"
#include "train/elapsed.hpp"

namespace dyncp::train {

namespace {

// MPI tags of the two directions (NCCL matches by call order, which the rounds keep).
constexpr int activation_tag = 71;
constexpr int gradient_tag = 72;

}  // namespace

// One microbatch in flight on this stage (see the header).
struct PipelineExecutor::Slot {
  Slot(std::size_t state_index, model::MicrobatchState& model_state, const Options& options,
       dist::ParallelState& parallel_state, const config::ModelArchitecture& architecture,
       core::Device device)
      : index(state_index),
        state(model_state),
        seams(parallel_state, architecture, options),
        buffers("pipeline.transfers", std::size_t{1} << 20, device) {
    if (device == core::Device::cuda)
      device_bin_arena =
          std::make_unique<core::Arena>("pipeline.device_bin", std::size_t{1} << 20, device);
  }

  std::size_t index;
  model::MicrobatchState& state;
  parallel::RankSeams seams;
  BinBuilder builder;
  core::Arena buffers;  // the transfers of this microbatch, on the model's device
  std::unique_ptr<core::Arena> device_bin_arena;
  model::PackedBin device_bin;
  const model::PackedBin* bin = nullptr;
  std::int64_t rows = 0;
  bool rank_in_group_zero = false;
  core::Tensor input, output, input_grad, output_grad;  // [rows, h]
};

PipelineExecutor::PipelineExecutor(model::Qwen3MoeModel& model, dist::ParallelState& parallel_state,
                                   const config::PipelineSplit& split, Options options)
    : model_(model),
      parallel_state_(parallel_state),
      split_(split),
      options_(std::move(options)),
      stage_(parallel_state.coordinates().pipeline_parallel_index) {
  DYNCP_CHECK(parallel_state.pipeline().size() == split.pipeline_size,
              "the pipeline group has one rank per stage of the split");
  chunks_ = parallel::stage_chunk_passes(split_, stage_);
}

PipelineExecutor::~PipelineExecutor() = default;

PipelineExecutor::Slot& PipelineExecutor::acquire(std::int64_t microbatch, std::int64_t chunk,
                                                  const Microbatch& source) {
  Slot*& entry = in_flight_[static_cast<std::size_t>(microbatch * split_.virtual_size + chunk)];
  DYNCP_CHECK(entry == nullptr, "a microbatch's chunk takes one slot");
  if (free_.empty()) {
    const std::size_t index = slots_.size();
    slots_.push_back(std::make_unique<Slot>(index, model_.microbatch_state(index), options_,
                                            parallel_state_, model_.architecture(),
                                            model_.parameters().device()));
    free_.push_back(slots_.back().get());
  }
  entry = free_.back();
  free_.pop_back();
  Slot& slot = *entry;
  slot.buffers.reset();
  const model::PackedBin& host_bin = slot.builder.build(*source.params, source.samples);
  slot.bin = slot.device_bin_arena ? &upload_bin(*slot.device_bin_arena, host_bin, slot.device_bin)
                                   : &host_bin;
  slot.rows = model_.stage_rows(*slot.bin);
  slot.rank_in_group_zero = source.params->rank_in_group == 0;
  slot.seams.set_group(source.group);
  slot.input = slot.output = slot.input_grad = slot.output_grad = core::Tensor{};
  return slot;
}

PipelineExecutor::Slot& PipelineExecutor::held(std::int64_t microbatch, std::int64_t chunk) {
  Slot* slot = in_flight_[static_cast<std::size_t>(microbatch * split_.virtual_size + chunk)];
  DYNCP_CHECK(slot != nullptr, "microbatch " + std::to_string(microbatch) + " chunk " +
                                   std::to_string(chunk) + " has a slot on stage " +
                                   std::to_string(stage_));
  return *slot;
}

void PipelineExecutor::release(std::int64_t microbatch, std::int64_t chunk) {
  Slot*& entry = in_flight_[static_cast<std::size_t>(microbatch * split_.virtual_size + chunk)];
  free_.push_back(entry);
  entry = nullptr;
}

void PipelineExecutor::run_pass(const packing::PipelineAction& pass,
                                std::span<const Microbatch> microbatches, Result& result) {
  const model::ChunkPass& chunk = chunks_[static_cast<std::size_t>(pass.chunk)];
  const core::DType dtype = model_.parameters().all_values().dtype();
  const std::int64_t hidden = model_.architecture().hidden_size;
  const auto start = std::chrono::steady_clock::now();
  if (pass.pass == packing::PipelinePass::forward) {
    Slot& slot = chunk.embedding ? acquire(pass.microbatch, pass.chunk,
                                           microbatches[static_cast<std::size_t>(pass.microbatch)])
                                 : held(pass.microbatch, pass.chunk);
    if (!chunk.loss) slot.output = slot.buffers.allocate({slot.rows, hidden}, dtype);
    // The options a forward hands on to its backward: the last microbatch's carry the hook.
    const bool last = pass.microbatch + 1 == static_cast<std::int64_t>(microbatches.size());
    const model::BinResult outcome = model_.forward_chunk(slot.state, *slot.bin, slot.seams.seams(),
                                                          last ? last_bin_options_ : bin_options_,
                                                          chunk, slot.input, slot.output);
    result.loss_sum += outcome.loss_sum;
    if (slot.rank_in_group_zero) result.aux_loss += outcome.aux_loss;
  } else {
    Slot& slot = held(pass.microbatch, pass.chunk);
    if (!chunk.embedding) slot.input_grad = slot.buffers.allocate({slot.rows, hidden}, dtype);
    model_.backward_chunk(slot.state, slot.output_grad, slot.input_grad);
  }
  busy_ms_ += milliseconds_since(start);
}

void PipelineExecutor::exchange(const packing::PipelineRound& round,
                                std::span<const Microbatch> microbatches) {
  dist::Comm& pipeline = parallel_state_.pipeline();
  const int me = pipeline.rank();
  const int stages = pipeline.size();
  const int next = (me + 1) % stages;
  const int previous = (me + stages - 1) % stages;
  const core::DType dtype = model_.parameters().all_values().dtype();
  const std::int64_t hidden = model_.architecture().hidden_size;
  const auto real = [&](const packing::PipelineTransfer& transfer) {
    return transfer.present() &&
           transfer.microbatch < static_cast<std::int64_t>(microbatches.size());
  };
  // One direction: what this stage sends `to` and receives `from`, posted together so two
  // neighbours never wait on each other's send.
  const auto start = [&](const packing::PipelineTransfer& sent, bool activation, int to,
                         const packing::PipelineTransfer& received, int from, int tag) {
    const core::Tensor* send = nullptr;
    core::Tensor* receive = nullptr;
    if (real(sent)) {
      Slot& slot = held(sent.microbatch, sent.chunk);
      send = activation ? &slot.output : &slot.input_grad;
    }
    if (real(received)) {
      Slot& slot = activation ? acquire(received.microbatch, received.chunk,
                                        microbatches[static_cast<std::size_t>(received.microbatch)])
                              : held(received.microbatch, received.chunk);
      core::Tensor& target = activation ? slot.input : slot.output_grad;
      target = slot.buffers.allocate({slot.rows, hidden}, dtype);
      receive = &target;
    }
    if (send == nullptr && receive == nullptr) return dist::Comm::PendingSendRecv{};
    return pipeline.start_send_recv(
        send ? send->raw_data() : nullptr, send ? static_cast<std::size_t>(send->numel()) : 0,
        send ? to : me, receive ? receive->raw_data() : nullptr,
        receive ? static_cast<std::size_t>(receive->numel()) : 0, receive ? from : me, dtype, tag);
  };
  dist::Comm::PendingSendRecv forward =
      start(round.send_activation, true, next, round.receive_activation, previous, activation_tag);
  dist::Comm::PendingSendRecv backward =
      start(round.send_gradient, false, previous, round.receive_gradient, next, gradient_tag);
  if (forward.slot >= 0) pipeline.wait(forward);
  if (backward.slot >= 0) pipeline.wait(backward);
}

const packing::PipelinePlan& PipelineExecutor::plan_for(std::int64_t microbatches,
                                                        bool forward_only) {
  for (const packing::PipelinePlan& plan : plans_)
    if (plan.microbatches == microbatches && plan.forward_only == forward_only) return plan;
  plans_.push_back(packing::plan_pipeline_rounds(split_.pipeline_size, split_.virtual_size,
                                                 microbatches, forward_only));
  return plans_.back();
}

PipelineExecutor::Result PipelineExecutor::run(std::span<const Microbatch> microbatches,
                                               const model::BinOptions& options,
                                               std::function<void(std::int64_t)> last_layer_done) {
  Result result;
  const auto count = static_cast<std::int64_t>(microbatches.size());
  const std::int64_t pp = split_.pipeline_size;
  const std::int64_t v = split_.virtual_size;
  const bool forward_only = !options.compute_gradients;
  scheduled_microbatches_ = packing::scheduled_microbatches(pp, v, count);
  const packing::PipelinePlan& plan = plan_for(scheduled_microbatches_, forward_only);
  in_flight_.assign(static_cast<std::size_t>(scheduled_microbatches_ * v), nullptr);
  bin_options_ = options;
  last_bin_options_ = options;
  last_bin_options_.after_layer_backward = std::move(last_layer_done);
  busy_ms_ = 0.0;
  const auto start = std::chrono::steady_clock::now();
  for (const packing::PipelineRound& round : plan.rounds[static_cast<std::size_t>(stage_)]) {
    const std::span<const packing::PipelineAction> passes(
        round.passes, static_cast<std::size_t>(round.num_passes));
    for (const packing::PipelineAction& pass : passes)
      if (pass.microbatch < count) run_pass(pass, microbatches, result);
    exchange(round, microbatches);
    // A microbatch's chunk is done after its backward (or, forwards only, its forward) and the
    // round that sent what it produced.
    for (const packing::PipelineAction& pass : passes)
      if (pass.microbatch < count && (forward_only || pass.pass == packing::PipelinePass::backward))
        release(pass.microbatch, pass.chunk);
  }
  for (const Slot* slot : in_flight_)
    DYNCP_CHECK(slot == nullptr, "every microbatch's slot is returned by the end of the step");
  result.rounds = plan.num_rounds();
  result.busy_ms = busy_ms_;
  result.wall_ms = milliseconds_since(start);
  double times[2] = {result.busy_ms, result.wall_ms};
  dist::Comm& pipeline = parallel_state_.pipeline();
  pipeline.all_reduce(&times[0], &times[0], 1, core::DType::f64, dist::ReduceOp::sum);
  pipeline.all_reduce(&times[1], &times[1], 1, core::DType::f64, dist::ReduceOp::max);
  result.bubble_fraction =
      times[1] > 0 ? 1.0 - times[0] / (static_cast<double>(pp) * times[1]) : 0.0;
  return result;
}

}  // namespace dyncp::train
