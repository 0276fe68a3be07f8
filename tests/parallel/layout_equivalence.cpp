// The invariant behind dynamic CP: one global batch gives the same loss and gradients on every
// layout. Run under mpirun with the layout on the command line; every rank also computes the
// one-rank reference in-process (same seeded weights, whole sequences in one bin, local seams)
// and compares its own gradient ranges with it.
//
//   mpirun -np 4 layout_equivalence --cp 2 --dynamic 1 --ep 2 --scheduler default_dynamic_cp
//
// Checks, each reported as passed/failed: loss, aux loss, every owned gradient range
// (||ours - ref|| / ||ref|| <= 1e-5), and that work is divided: over the pool every query row
// was processed exactly once per layer (no rank recomputed another's share). Under EP each
// rank holds only its experts (dense parameters + experts / ep, seeded like the reference's
// experts there); the reference's buffers are compared through the tensors of the same names.
//
// With --window W the model has sliding-window attention (every exchange masks its keys by
// global position; the ring skips blocks no query's window reaches), and the reference without
// the window must give another loss, so the window is known to matter for the batch.
// With --rope-dynamic C the model has dynamic NTK RoPE (factor 4) over a context of C: each
// sequence longer than C is rotated with its own frequencies, which every rank of its CP group
// must derive from the whole sequence's length, not from the shard it holds; the reference
// with default RoPE must give another loss.
//
// With --device cuda (the layout_equivalence_emulated build) the layout under test runs on the
// emulated GPU: parameters, gradients, moments and activations in device memory, kernels,
// tensors over NCCL (emulated over MPI) and host metadata over MPI, against the same CPU
// reference.
//
// With --pp P (and --vpp V) the world is P pipeline stages of dp x cp ranks: each rank holds
// only its stage's layers (Megatron's split of --layers N layers over P x V virtual stages),
// the microbatches run the 1F1B (or interleaved) schedule with activations and gradients
// passed between stages, and every check above holds per stage (gradients of the tensors this
// rank holds, compared by name). --step-tolerance T then also compares the loss and the whole
// model's gradient (every stage's, every rank's own part once) with the reference at every
// optimizer step, relative difference <= T, each step at the same weights: after both optimizers
// step, the layout takes the reference's new values (AdamW turns round-off in near-zero
// gradients into lr-sized moves, which separate two trajectories by more than the round-off of
// any one gradient, on every layout alike).
//
// With --distributed-optimizer 1 the gradients are reduce-scattered: each rank checks its own
// pieces (relative to the reference range's norm), holds optimizer state for only its
// 1/shards of the elements (rounded up), and the moments gathered for a checkpoint match the
// reference optimizer's and survive a reload.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../model/tiny_architectures.hpp"
#include "config/pipeline_split.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/sample.hpp"
#include "dist/abort.hpp"
#include "dist/launch_env.hpp"
#include "dist/mpi_comm.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "layout_equivalence_support.hpp"
#include "model/local_seams.hpp"
#include "model/qwen3_moe_model.hpp"
#include "packing/alignment.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/pipeline_stage.hpp"
#include "train/optimizer.hpp"
#include "train/step_engine.hpp"
#ifdef DYNCP_EQUIVALENCE_ON_CUDA
#include "dist/nccl_comm.hpp"
#include "dist/routed_comm.hpp"
#include "ops/cuda/cuda_backend.hpp"
#endif

using namespace dyncp;
using namespace dyncp::equivalence;

namespace {

// Short and long sequences mixed, fixed token ids, loss on every next token.
class FixedSource final : public data::SampleSource {
 public:
  FixedSource(std::vector<std::int64_t> lengths, std::int64_t vocab)
      : lengths_(std::move(lengths)) {
    for (std::size_t i = 0; i < lengths_.size(); ++i) {
      std::vector<std::int32_t> tokens(static_cast<std::size_t>(lengths_[i]));
      core::Rng rng(99, core::RngPurpose::test, i);
      for (auto& token : tokens)
        token = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
      tokens_.push_back(std::move(tokens));
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t length(std::int64_t index) const override {
    return lengths_[static_cast<std::size_t>(index)];
  }
  data::Sample sample(std::int64_t index, std::int64_t alignment, std::int32_t pad) const override {
    const auto& tokens = tokens_[static_cast<std::size_t>(index)];
    const std::vector<std::uint8_t> targets(tokens.size(), 1);
    return data::make_sample(index, tokens, targets, alignment, pad);
  }

 private:
  std::vector<std::int64_t> lengths_;
  std::vector<std::vector<std::int32_t>> tokens_;
};

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime runtime(&argc, &argv);
  int passed = 0;
  int failed = 0;
  try {
    const Options options = parse_options(argc, argv);
    auto launch_world = runtime.world();
    std::unique_ptr<dist::Comm> routed_world;
#ifdef DYNCP_EQUIVALENCE_ON_CUDA
    if (options.device == core::Device::cuda) {
      ops::cuda::install_backend();
      dist::install_nccl_device_comms();
      core::device_memory().select_device(dist::discover_launch_env().local_rank,
                                          launch_world->rank());
      routed_world = dist::make_routed_world(*launch_world, 600.0);
    }
#endif
    dist::Comm* world = routed_world ? routed_world.get() : launch_world.get();
    const int rank = world->rank();
    const auto check = [&](bool ok, const std::string& what) {
      if (ok) {
        ++passed;
      } else {
        ++failed;
        std::printf("rank %d FAILED: %s\n", rank, what.c_str());
      }
    };

    config::ModelArchitecture architecture =
        options.hybrid ? testing::tiny_hybrid() : testing::tiny_qwen3_moe();
    if (options.query_heads > 0) {
      architecture.num_attention_heads = options.query_heads;
      architecture.num_key_value_heads = options.kv_heads;
      if (options.hybrid) {
        architecture.linear_num_value_heads = options.query_heads;
        architecture.linear_num_key_heads = options.kv_heads;
      }
      architecture.resolve();
    }
    architecture.tie_word_embeddings = options.tie;
    if (options.layers > 0) {
      // More layers of the same kinds: the hybrid alternates DeltaNet and attention layers.
      architecture.num_hidden_layers = options.layers;
      if (options.hybrid) {
        architecture.layer_types.clear();
        for (std::int64_t i = 0; i < options.layers; ++i)
          architecture.layer_types.push_back(i % 2 == 0 ? config::LayerMixer::linear_attention
                                                        : config::LayerMixer::full_attention);
      }
      architecture.resolve();
    }
    if (options.sliding_window > 0) {
      if (options.hybrid) throw std::runtime_error("--window: the hybrid's attention has none");
      architecture.sliding_window = options.sliding_window;
    }
    if (options.rope_dynamic_context > 0) {
      architecture.rope_scaling.rope_type = "dynamic";
      architecture.rope_scaling.factor = 4.0;
      architecture.max_position_embeddings = options.rope_dynamic_context;
    }
    model::ModelOptions model_options;
    model_options.recompute_full = options.recompute;
    model_options.aux_loss =
        options.aux ? ops::MoeAuxLossType::seq_aux_loss : ops::MoeAuxLossType::none;
    model_options.moe_router_force_load_balancing = options.force_balance;
    // With the dynamic capacity of 32 tokens per rank, 200 needs 8 ranks, 100 four, 60 two.
    const std::vector<std::int64_t> lengths =
        options.mix_group_sizes
            ? std::vector<std::int64_t>{5, 7, 3, 41, 9, 12, 2, 60, 4, 6, 8, 200, 30, 3, 100, 21}
            : std::vector<std::int64_t>{5, 7, 3, 41, 9, 12, 2, 60, 4, 6, 8, 10, 30, 3, 5, 21};
    FixedSource source(lengths, architecture.vocab_size);
    const auto batch_size = static_cast<std::int64_t>(lengths.size());

    // Reference: one rank, whole sequences, one bin.
    model::Qwen3MoeModel reference(architecture, model_options);
    reference.parameters().init_random(7);
    std::vector<data::Sample> whole;
    packing::PackedSeqParams whole_params;
    whole_params.cu_seqlens_padded.push_back(0);
    whole_params.cu_seqlens.push_back(0);
    std::int64_t reference_tokens = 0;
    for (std::int64_t i = 0; i < batch_size; ++i) {
      whole.push_back(source.sample(i, 1, 0));
      const std::int64_t n = lengths[static_cast<std::size_t>(i)];
      whole_params.sample_ids.push_back(i);
      whole_params.local_ranges.push_back(
          {whole_params.cu_seqlens_padded.back(), whole_params.cu_seqlens_padded.back() + n, i, 0});
      whole_params.cu_seqlens_padded.push_back(whole_params.cu_seqlens_padded.back() + n);
      whole_params.cu_seqlens.push_back(whole_params.cu_seqlens_padded.back());
      for (auto mask : whole.back().loss_mask) reference_tokens += mask;
    }
    train::BinBuilder builder;
    model::LocalSeams local;
    model::BinOptions reference_options;
    reference_options.loss_grad_scale = 1.0 / static_cast<double>(reference_tokens);
    reference_options.aux_num_sequences_global = batch_size;
    reference.parameters().zero_grads();
    const model::BinResult reference_result =
        reference.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);
    const double reference_loss = reference_result.loss_sum / static_cast<double>(reference_tokens);
    if (options.sliding_window > 0 || options.rope_dynamic_context > 0) {
      // The feature must matter for this batch (sequences longer than the window or the
      // context), or a layout that ignored it would pass: without it the reference's loss and
      // gradients move far past the tolerances below (10x the loss's, 100x the gradients').
      config::ModelArchitecture unwindowed = architecture;
      unwindowed.sliding_window = 0;
      unwindowed.rope_scaling.rope_type = "default";
      model::Qwen3MoeModel full(unwindowed, model_options);
      full.parameters().init_random(7);
      full.parameters().zero_grads();
      const double full_loss =
          full.run_bin(builder.build(whole_params, whole), local.seams(), reference_options)
              .loss_sum /
          static_cast<double>(reference_tokens);
      const core::Tensor& windowed_grads = reference.parameters().all_grads();
      const double grad_change =
          difference_norm(full.parameters().all_grads().data<float>(), windowed_grads.data<float>(),
                          windowed_grads.numel()) /
          norm(windowed_grads.data<float>(), windowed_grads.numel());
      const double loss_change = std::abs(full_loss - reference_loss) / std::abs(reference_loss);
      char line[200];
      std::snprintf(
          line, sizeof line,
          "%s %lld: without it the reference loss moves by %.3g, its gradients by "
          "%.3g (relative)",
          options.sliding_window > 0 ? "window" : "dynamic RoPE past",
          static_cast<long long>(options.sliding_window > 0 ? options.sliding_window
                                                            : options.rope_dynamic_context),
          loss_change, grad_change);
      // Dynamic RoPE barely moves a model this small's loss, but its gradients by percents.
      check((loss_change > 1e-4 || options.sliding_window == 0) && grad_change > 1e-3, line);
      if (rank == 0) std::printf("%s\n", line);
    }
    // The same reference in fp64 with the same (fp32) weights: the truth against which a
    // gradient that is a near-cancelling sum (e.g. a DeltaNet dt_bias, summed over every token)
    // shows how inexact the fp32 reference itself is.
    model::ModelOptions truth_options = model_options;
    truth_options.dtype = core::DType::f64;
    model::Qwen3MoeModel truth(architecture, truth_options);
    {
      const float* from = reference.parameters().all_values().data<float>();
      double* to = truth.parameters().all_values().data<double>();
      for (std::int64_t i = 0; i < reference.parameters().num_parameters(); ++i) to[i] = from[i];
    }
    truth.parameters().zero_grads();
    truth.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);

    // The layout under test.
    const int etp = options.etp > 0 ? options.etp : options.tp;
    const dist::ParallelLayout layout =
        dist::layout_for_world(world->size(), options.cp, options.ep, options.dynamic,
                               options.min_cp, {options.pp, options.vpp}, {options.tp, etp});
    dist::ParallelState parallel_state(*world, layout);
    // This rank's pipeline stage: its layers of Megatron's split.
    config::PipelineSplitInput split_input;
    split_input.num_layers = architecture.num_hidden_layers;
    split_input.pipeline_size = options.pp;
    split_input.virtual_size = options.vpp;
    const config::PipelineSplit pipeline_split = config::split_layers(split_input);
    const int stage = parallel_state.coordinates().pipeline_parallel_index;
    const model::ModelPart part = parallel::stage_model_part(pipeline_split, stage);
    // Each rank holds only its EP index's experts; the reference holds every expert. Under TP
    // it holds its pieces of the split tensors.
    model::ModelOptions sliced_options = model_options;
    sliced_options.experts =
        parallel::local_expert_range(architecture.num_experts, parallel_state.expert_parallel());
    sliced_options.tensor_parallel = {options.tp, parallel_state.tensor_parallel().rank(), etp,
                                      parallel_state.expert_tensor_parallel().rank(),
                                      options.sequence_parallel};
    sliced_options.device = options.device;
    sliced_options.part = part;
    const bool s = options.selective;
    sliced_options.selective = {.moe_act = s, .layernorm = s, .mlp = s, .shared_experts = s};
    sliced_options.moe_grouped_gemm = options.moe_kernels;
    sliced_options.moe_permute_fusion = options.moe_kernels;
    model::Qwen3MoeModel model(architecture, sliced_options);
    model.parameters().init_random(7);
    check_memory_division(options, architecture, part, model.parameters(), reference.parameters(),
                          parallel_state, etp, check);
    train::StepEngineOptions engine_options;
    engine_options.scheduler = options.scheduler;
    // Static CP must fit the longest sequence (60, padded to 64) on cp ranks; dynamic CP uses a
    // capacity that sends it to a group of two or more while short ones run alone.
    engine_options.max_seqlen_per_dp_cp_rank = options.dynamic ? 32 : 64 / options.cp;
    engine_options.alignment = packing::alignment_rule(
        {layout.data_parallel_size, layout.context_parallel_size, layout.dynamic_context_parallel,
         options.tp, options.sequence_parallel},
        options.alignment);
    engine_options.fold_alignment_padding = options.fold_alignment_padding;
    engine_options.distributed_optimizer = options.distributed_optimizer;
    engine_options.cp_comm_type = options.cp_comm_type;
    engine_options.hierarchical_inner_size = options.hierarchical_inner;
    engine_options.pipeline = pipeline_split;
    train::StepEngine engine(model, parallel_state, source, engine_options);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(batch_size));
    for (std::int64_t i = 0; i < batch_size; ++i) ids[static_cast<std::size_t>(i)] = i;
    const train::StepOutcome outcome = engine.forward_backward(ids);

    char line[256];
    check_exchange_ran(options, engine, parallel_state, outcome, check);
    std::snprintf(line, sizeof line, "loss %.9g vs reference %.9g", outcome.loss, reference_loss);
    check(outcome.loss_tokens == reference_tokens, "loss tokens " +
                                                       std::to_string(outcome.loss_tokens) +
                                                       " vs " + std::to_string(reference_tokens));
    check(std::abs(outcome.loss - reference_loss) <= 1e-5 * std::abs(reference_loss), line);
    if (options.aux) {
      std::snprintf(line, sizeof line, "aux loss %.9g vs reference %.9g", outcome.aux_loss,
                    reference_result.aux_loss);
      check(
          reference_result.aux_loss > 0 && std::abs(outcome.aux_loss - reference_result.aux_loss) <=
                                               1e-5 * reference_result.aux_loss,
          line);
    }

    const std::vector<float> our_grads = host_floats(model.parameters().all_grads());
    const float* ours = our_grads.data();
    const std::vector<float> reference_grads = laid_out_like(
        model.parameters(), reference.parameters(), reference.parameters().all_grads());
    const float* theirs = reference_grads.data();
    const std::vector<double> truth_grads = laid_out_like<double>(
        model.parameters(), truth.parameters(), truth.parameters().all_grads());
    const double* truths = truth_grads.data();
    double worst = 0;
    // Distributed optimizer: only this rank's pieces hold sums; each piece of a range is
    // measured against the whole range's reference norm, as the replicated check is.
    const parallel::ShardedStateSync* sharded = engine.sharded_state_sync();
    const auto range_norm = [&](std::int64_t offset) {
      for (const auto& range : engine.partition().ranges)
        if (offset >= range.offset && offset < range.offset + range.count)
          return norm(theirs + range.offset, range.count);
      throw std::runtime_error("an owned piece outside the partition");
    };
    for (const auto& range : sharded ? sharded->shards().owned_ranges : engine.partition().ranges) {
      const double reference_norm = range_norm(range.offset);
      const double error =
          difference_norm(ours + range.offset, theirs + range.offset, range.count) /
          std::max(reference_norm, 1e-12);
      worst = std::max(worst, error);
      std::snprintf(line, sizeof line,
                    "gradient range at %lld (%lld elements, expert %d): relative error %.3g",
                    static_cast<long long>(range.offset), static_cast<long long>(range.count),
                    range.is_expert ? 1 : 0, error);
      bool ok = error <= 1e-5;
      if (!ok) {
        // Allowed only where the fp32 reference is itself that far from the fp64 truth: the
        // layout must then be as close to the truth as the reference, within 10x.
        const double truth_norm = norm(truths + range.offset, range.count);
        const double ours_vs_truth =
            difference_norm(ours + range.offset, truths + range.offset, range.count) / truth_norm;
        const double reference_vs_truth =
            difference_norm(theirs + range.offset, truths + range.offset, range.count) / truth_norm;
        ok = ours_vs_truth <= 10 * reference_vs_truth;
        std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                      "; vs fp64 truth %.3g, the fp32 reference %.3g", ours_vs_truth,
                      reference_vs_truth);
        if (ok && rank == 0) std::printf("accepted by the fp64 bound: %s\n", line);
      }
      check(ok, line + (" [" + tensors_in(model.parameters(), range.offset, range.count) + "]"));
    }

    // Work is divided: over the pool, every padded row of the batch is a query row exactly
    // once per full-attention layer (twice with full recompute, whose backward re-runs the
    // forward). Gated DeltaNet layers run whole sequences on every rank of a group (see
    // parallel/cp_linear_attention.hpp) and are not counted here.
    std::int64_t rows = engine.seam_counters().attention_query_rows;
    parallel_state.pool().all_reduce(&rows, &rows, 1, core::DType::i64, dist::ReduceOp::sum);
    std::int64_t attention_layers = 0;  // of this stage
    for (std::size_t i = 0; i < model.parameters().layers.size(); ++i)
      attention_layers += model.parameters().layers[i].mixer == config::LayerMixer::full_attention;
    // Each sequence is padded for the group it ran on; the step reports the same total.
    std::int64_t padded_total = 0;
    const packing::Schedule& schedule = engine.last_schedule();
    for (const packing::ScheduleGroup& group : schedule.groups)
      for (const std::int64_t id : schedule.ids_of(group))
        padded_total +=
            engine_options.alignment.padded(lengths[static_cast<std::size_t>(id)], group.size);
    check(outcome.padded_tokens == padded_total, "padded tokens " +
                                                     std::to_string(outcome.padded_tokens) +
                                                     " vs " + std::to_string(padded_total));
    if (options.dynamic && options.alignment == config::PackingAlignment::per_group) {
      // Per-group padding never pads more than the pool rule, and here strictly less (the
      // batch's odd lengths on one rank need no padding at all).
      std::int64_t pool_total = 0;
      const std::int64_t pool_multiple =
          packing::alignment_multiple({layout.data_parallel_size, layout.context_parallel_size,
                                       true, options.tp, options.sequence_parallel});
      for (const auto length : lengths) pool_total += packing::padded_length(length, pool_multiple);
      check(padded_total < pool_total, "per-group padding " + std::to_string(padded_total) +
                                           " below the pool rule's " + std::to_string(pool_total));
    }
    const std::int64_t expected_rows =
        padded_total * attention_layers * (options.recompute ? 2 : 1);
    check(rows == expected_rows, "query rows over the pool " + std::to_string(rows) + " vs " +
                                     std::to_string(expected_rows));

    // Several optimizer steps on both: the parameters stay together. AdamW moves every
    // parameter by about lr per step whatever the gradient's size, so the difference is
    // measured in units of lr. Tolerance 1e-2 lr: where a gradient is nearly zero, fp32
    // round-off from another summation order changes m / sqrt(v) by a visible fraction (up to
    // about 1e-3 lr is seen over 3 steps); a real layout bug moves parameters by whole lr units.
    // eps 1e-6 rather than AdamW's usual 1e-8: the hybrid's DeltaNet decay parameters (A_log,
    // dt_bias) start with gradients of 1e-10..1e-6 that are themselves sums over every token,
    // below their own fp32 round-off (see the fp64 floor above); with eps 1e-8 each such element
    // moves by +-lr on the sign of that round-off, whichever layout is the more exact one.
    const double lr = options.lr;
    train::AdamWSettings adamw;
    adamw.eps = 1e-6;
    const auto reference_partition = parallel::partition_parameters(reference.parameters());
    train::AdamWOptimizer reference_optimizer(reference.parameters(), reference_partition, adamw);
    train::AdamWOptimizer optimizer =
        sharded ? train::AdamWOptimizer(model.parameters(), *engine.sharded_state_sync(), adamw)
                : train::AdamWOptimizer(model.parameters(), engine.partition(), adamw);
    if (sharded) check_state_division(engine, parallel_state, optimizer, check);
    // Every step's loss agrees with the reference's to fp32 round-off (1e-6 relative).
    double worst_step_loss = std::abs(outcome.loss - reference_loss) / std::abs(reference_loss);
    // --step-tolerance: the loss and the whole model's gradient against the reference at every
    // step. Each rank adds its own part once: its pieces (distributed optimizer), else dense
    // ranges on pool rank 0 and expert ranges on expert-data-parallel rank 0 of each stage.
    double worst_step_errors[2] = {0, 0};
    const auto compare_step = [&](int step, const train::StepOutcome& step_outcome,
                                  const model::BinResult& step_reference) {
      if (options.step_tolerance <= 0) return;
      const double reference_total =
          step_reference.loss_sum / static_cast<double>(reference_tokens) + step_reference.aux_loss;
      const double loss_error =
          std::abs(step_outcome.loss + step_outcome.aux_loss - reference_total) /
          std::abs(reference_total);
      const std::vector<float> grads = host_floats(model.parameters().all_grads());
      const std::vector<float> expected = laid_out_like(model.parameters(), reference.parameters(),
                                                        reference.parameters().all_grads());
      double sums[2] = {0, 0};
      const auto add = [&](const parallel::ParameterRange& range) {
        for (std::int64_t i = range.offset; i < range.offset + range.count; ++i) {
          const double d = static_cast<double>(grads[static_cast<std::size_t>(i)]) -
                           expected[static_cast<std::size_t>(i)];
          sums[0] += d * d;
          sums[1] += static_cast<double>(expected[static_cast<std::size_t>(i)]) *
                     expected[static_cast<std::size_t>(i)];
        }
      };
      if (sharded) {
        for (const auto& range : sharded->shards().owned_ranges) add(range);
      } else {
        for (const auto& range : engine.partition().ranges)
          if ((range.is_expert ? parallel_state.expert_data_parallel() : parallel_state.pool())
                  .rank() == 0)
            add(range);
      }
      world->all_reduce(sums, sums, 2, core::DType::f64, dist::ReduceOp::sum);
      const double gradient_error = std::sqrt(sums[0] / sums[1]);
      worst_step_errors[0] = std::max(worst_step_errors[0], loss_error);
      worst_step_errors[1] = std::max(worst_step_errors[1], gradient_error);
      char text[200];
      std::snprintf(text, sizeof text,
                    "step %d: loss %.9g vs %.9g (relative %.3g), whole gradient relative "
                    "difference %.3g",
                    step, step_outcome.loss + step_outcome.aux_loss, reference_total, loss_error,
                    gradient_error);
      check(loss_error <= options.step_tolerance && gradient_error <= options.step_tolerance, text);
    };
    for (int step = 1; step <= options.optimizer_steps; ++step) {
      if (step > 1) {
        reference.parameters().zero_grads();
        const model::BinResult again =
            reference.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);
        const double expected = again.loss_sum / static_cast<double>(reference_tokens);
        const train::StepOutcome step_outcome = engine.forward_backward(ids);
        worst_step_loss =
            std::max(worst_step_loss, std::abs(step_outcome.loss - expected) / std::abs(expected));
        compare_step(step, step_outcome, again);
      } else {
        compare_step(step, outcome, reference_result);
      }
      reference_optimizer.step(lr, step, 1.0);
      optimizer.step(lr, step, 1.0);
      if (options.step_tolerance > 0 && step < options.optimizer_steps) {
        const std::vector<float> values = laid_out_like(model.parameters(), reference.parameters(),
                                                        reference.parameters().all_values());
        model.parameters().all_values().copy_from(
            core::Tensor::view_of(const_cast<float*>(values.data()),
                                  {static_cast<std::int64_t>(values.size())}, core::DType::f32));
      }
    }
    std::snprintf(line, sizeof line, "largest relative loss difference over %d steps: %.3g",
                  std::max(options.optimizer_steps, 1), worst_step_loss);
    check(worst_step_loss <= 1e-6, line);
    if (rank == 0) std::printf("%s\n", line);
    if (options.step_tolerance > 0 && rank == 0)
      std::printf("over %d steps: worst loss difference %.3g, worst gradient difference %.3g\n",
                  options.optimizer_steps, worst_step_errors[0], worst_step_errors[1]);
    if (options.optimizer_steps > 0) {
      const std::vector<float> values_after = host_floats(model.parameters().all_values());
      const float* after = values_after.data();
      const std::vector<float> reference_values = laid_out_like(
          model.parameters(), reference.parameters(), reference.parameters().all_values());
      const float* reference_after = reference_values.data();
      double worst_lr_units = 0;
      std::int64_t worst_at = 0;
      for (std::int64_t i = 0; i < model.parameters().num_parameters(); ++i) {
        const double units = std::abs(static_cast<double>(after[i]) - reference_after[i]) / lr;
        if (units > worst_lr_units) {
          worst_lr_units = units;
          worst_at = i;
        }
      }
      std::snprintf(line, sizeof line,
                    "after %d AdamW steps the largest parameter difference is %.3g lr",
                    options.optimizer_steps, worst_lr_units);
      check(worst_lr_units <= 1e-2,
            line + (" [" + tensors_in(model.parameters(), worst_at, 1) + "]"));
      if (rank == 0) std::printf("%s\n", line);

      // What a checkpoint stores: moments the size of this rank's parameters, gathered from
      // their owners, agree with the reference optimizer's there, and reloading them gives a
      // fresh optimizer the same state.
      const train::AdamWOptimizer::FullSizeMoments moments = optimizer.full_size_moments();
      optimizer.gather_full_size_moments(moments);
      for (const auto& [name, full, reference_moment] :
           {std::tuple{"exp_avg", moments.exp_avg, reference_optimizer.exp_avg()},
            std::tuple{"exp_avg_sq", moments.exp_avg_sq, reference_optimizer.exp_avg_sq()}}) {
        const std::vector<float> expected =
            laid_out_like(model.parameters(), reference.parameters(), reference_moment);
        const auto n = static_cast<std::int64_t>(expected.size());
        const double error = difference_norm(host_floats(full).data(), expected.data(), n) /
                             std::max(norm(expected.data(), n), 1e-30);
        std::snprintf(line, sizeof line, "gathered %s: relative error %.3g", name, error);
        check(full.numel() == n && error <= 1e-4, line);
      }
      if (sharded) {
        train::AdamWOptimizer reloaded(model.parameters(), *engine.sharded_state_sync(), {});
        reloaded.load_full_size_moments(moments);
        const auto same = [](const core::Tensor& a, const core::Tensor& b) {
          return a.numel() == b.numel() && host_floats(a) == host_floats(b);
        };
        check(same(reloaded.exp_avg(), optimizer.exp_avg()) &&
                  same(reloaded.exp_avg_sq(), optimizer.exp_avg_sq()),
              "moments reloaded from the full-size form equal the owned pieces");
      }
    }

    if (options.overlap_steps > 0)
      compare_overlap(options, architecture, sliced_options, parallel_state, source, engine_options,
                      ids, check);

    if (rank == 0) {
      std::printf(
          "layout pp=%d vpp=%d tp=%d%s dp=%d cp=%d ep=%d dynamic=%d window=%lld on %s: "
          "microbatches %lld, worst gradient error %.3g\n",
          layout.pipeline_model_parallel_size, layout.virtual_pipeline_model_parallel_size,
          layout.tensor_model_parallel_size, options.sequence_parallel ? " (sp)" : "",
          layout.data_parallel_size, layout.context_parallel_size,
          layout.expert_model_parallel_size, layout.dynamic_context_parallel ? 1 : 0,
          static_cast<long long>(options.sliding_window),
          options.device == core::Device::cuda ? "the emulated GPU" : "the CPU",
          static_cast<long long>(outcome.microbatches), worst);
    }
    int totals[2] = {passed, failed};
    world->all_reduce(totals, totals, 2, core::DType::i32, dist::ReduceOp::sum);
    if (rank == 0) std::printf("%d passed, %d failed\n", totals[0], totals[1]);
    return totals[1] == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::printf("error: %s\n", error.what());
    dist::abort_job(error.what());
  }
}
